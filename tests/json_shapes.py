"""The JSON shapes of DESIGN §4 that scripts rely on, spelled out once for the tests."""

MESSAGE_KEYS = [
    "sequence_number",
    "message_id",
    "enqueued_time",
    "expires_at",
    "delivery_count",
    "dead_letter_reason",
    "dead_letter_error_description",
    "dead_letter_source",
    "subject",
    "correlation_id",
    "content_type",
    "session_id",
    "reply_to",
    "to",
    "time_to_live_s",
    "application_properties",
    "body",
    "body_encoding",
]
#: A `purge --export` record: the Message shape, then its delete mark (0 until the delete is confirmed, then 1).
EXPORT_KEYS = [*MESSAGE_KEYS, "sbdlq_deleted"]
