"""Connection-string parsing and secret redaction (sbdlq.connstr)."""

from __future__ import annotations

import traceback

import pytest

from sbdlq.connstr import ConnectionInfo, parse_connection_string, redact
from sbdlq.errors import BadInput, ExitStatus

KEY = "Zm9vYmFyS2V5VmFsdWVUaGF0TXVzdE5ldmVyTGVhaz0="
SIG = "pl8VSqWq5%2BlbTqzUa3Xjs0rZ4rH1A2%2FQ3w5EXAMPLE%3D"
SAS = f"SharedAccessSignature sr=sb%3a%2f%2fcontoso.servicebus.windows.net%2forders&sig={SIG}&se=1893456000&skn=send"
REAL = (
    f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY}"
)
EMU = (
    "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)

# text, host, port, key_name, has key, has sas, entity_path, emulator
# fmt: off
VALID = [
    (REAL, "contoso.servicebus.windows.net", None, "RootManageSharedAccessKey", True, False, None, False),
    (REAL + ";", "contoso.servicebus.windows.net", None, "RootManageSharedAccessKey", True, False, None, False),
    (REAL + ";EntityPath=orders", "contoso.servicebus.windows.net", None, "RootManageSharedAccessKey", True, False,
     "orders", False),
    # keys are case-insensitive, whitespace around parts tolerated
    (f" endpoint=sb://contoso.servicebus.windows.net/ ; sharedaccesskeyname=Root ; SHAREDACCESSKEY={KEY} ",
     "contoso.servicebus.windows.net", None, "Root", True, False, None, False),
    (EMU, "127.0.0.1", 5672, "RootManageSharedAccessKey", True, False, None, True),
    # emulator without a port: 5672; the value of UseDevelopmentEmulator is case-insensitive
    ("Endpoint=sb://localhost;SharedAccessKeyName=R;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=True",
     "localhost", 5672, "R", True, False, None, True),
    ("Endpoint=sb://localhost:15672;SharedAccessKeyName=R;SharedAccessKey=k;usedevelopmentemulator=TRUE",
     "localhost", 15672, "R", True, False, None, True),
    ("Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=R;SharedAccessKey=k;"
     "UseDevelopmentEmulator=false", "contoso.servicebus.windows.net", None, "R", True, False, None, False),
    # a SAS token instead of a key (key name not needed)
    (f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessSignature={SAS}",
     "contoso.servicebus.windows.net", None, None, False, True, None, False),
    # unknown keys are tolerated
    (REAL + ";TransportType=AmqpWebSockets;Foo=bar", "contoso.servicebus.windows.net", None,
     "RootManageSharedAccessKey", True, False, None, False),
    # ARM-style endpoints: https scheme and :443
    ("Endpoint=https://contoso.servicebus.windows.net:443/;SharedAccessKeyName=R;SharedAccessKey=k",
     "contoso.servicebus.windows.net", 443, "R", True, False, None, False),
    ("Endpoint=sb://[::1]:5672;SharedAccessKeyName=R;SharedAccessKey=k;UseDevelopmentEmulator=true",
     "::1", 5672, "R", True, False, None, True),
]
# fmt: on


@pytest.mark.parametrize(("text", "host", "port", "key_name", "has_key", "has_sas", "entity", "emulator"), VALID)
def test_parse_valid(
    text: str,
    host: str,
    port: int | None,
    key_name: str | None,
    has_key: bool,
    has_sas: bool,
    entity: str | None,
    emulator: bool,
) -> None:
    info = parse_connection_string(text)
    assert (info.host, info.port, info.key_name) == (host, port, key_name)
    assert (info.key is not None, info.sas is not None) == (has_key, has_sas)
    assert info.entity_path == entity
    assert info.use_emulator is emulator
    assert info.endpoint.startswith("sb://")


# text, words the one-line message must contain
# fmt: off
INVALID = [
    ("", "empty"),
    ("   ", "empty"),
    (f"SharedAccessKeyName=Root;SharedAccessKey={KEY}", "no Endpoint"),
    (f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKey={KEY}", "no SharedAccessKeyName"),
    ("Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root", "no SharedAccessKey"),
    ("Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=", "no SharedAccessKey"),
    ("just some garbage pasted here", "not KEY=VALUE"),
    # a bare key pasted on its own: base64 ends with '=', so it reads as an unknown name
    (KEY, "no Endpoint"),
    (f"Endpoint=sb://contoso.servicebus.windows.net/;{KEY.rstrip('=')}", "part 2 of 2"),
    (f"Endpoint=ftp://contoso.servicebus.windows.net/;SharedAccessKeyName=R;SharedAccessKey={KEY}", "scheme 'ftp'"),
    (f"Endpoint=contoso.servicebus.windows.net;SharedAccessKeyName=R;SharedAccessKey={KEY}", "no scheme"),
    (f"Endpoint=sb:///orders;SharedAccessKeyName=R;SharedAccessKey={KEY}", "no valid host"),
    (f"Endpoint=sb://bad_host!.net/;SharedAccessKeyName=R;SharedAccessKey={KEY}", "no valid host"),
    (f"Endpoint=sb://contoso.servicebus.windows.net:notaport/;SharedAccessKeyName=R;SharedAccessKey={KEY}",
     "invalid port"),
    (f"{REAL};SharedAccessSignature={SAS}", "both SharedAccessKey and SharedAccessSignature"),
    (f"{REAL};UseDevelopmentEmulator=yes", "UseDevelopmentEmulator must be true or false"),
]
# fmt: on


@pytest.mark.parametrize(("text", "expected"), INVALID)
def test_parse_invalid_names_the_problem_and_hides_the_key(text: str, expected: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_connection_string(text)
    line = caught.value.line()
    assert expected in line
    assert "\n" not in line
    assert KEY not in line and SIG not in line
    assert text.strip() not in line or not text.strip()
    assert caught.value.exit_status is ExitStatus.USAGE


def test_repr_and_str_hide_key_and_sas() -> None:
    info = parse_connection_string(REAL)
    sas_info = parse_connection_string(f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessSignature={SAS}")
    for text in (repr(info), str(info), repr(sas_info), f"{info}", repr([info])):
        assert KEY not in text and SIG not in text and "sig=" not in text
    assert "contoso.servicebus.windows.net" in repr(info)
    assert "RootManageSharedAccessKey" in repr(info)


def test_connection_info_is_frozen() -> None:
    info = parse_connection_string(EMU)
    with pytest.raises(AttributeError):
        info.host = "elsewhere"  # type: ignore[misc]
    assert isinstance(info, ConnectionInfo)
    assert info.address == "127.0.0.1:5672"


UNSEEN = "UnSeenKeyNeverParsed0123456789abcdefghijkl="

REDACT_CASES = [
    f"Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={UNSEEN}",
    f"Endpoint=sb://x/;SharedAccessKey={UNSEEN};EntityPath=orders",
    f"{{'SharedAccessKey': '{UNSEEN}', 'other': 1}}",
    f'{{"sharedaccesskey": "{UNSEEN}"}}',
    f"SharedAccessKey = {UNSEEN}",
    f"Authorization: SharedAccessSignature sr=x&sig={UNSEEN}&se=1&skn=Root",
    f"{{'Authorization': 'Bearer {UNSEEN}', 'x-ms-version': '2021-05'}}",
    f"headers={{'authorization': '{UNSEEN}'}}",
    f"GET https://x/orders?sig={UNSEEN}&se=1",
    f"https://x/orders?sig%3D{UNSEEN}",
    f"SharedAccessSignature=SharedAccessSignature sr=abc&sig={UNSEEN}&se=1&skn=n",
]


@pytest.mark.parametrize("text", REDACT_CASES)
def test_redact_masks_secret_values(text: str) -> None:
    masked = redact(text)
    assert UNSEEN not in masked
    assert "***" in masked


def test_redact_keeps_what_is_not_secret() -> None:
    text = "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=abc"
    masked = redact(text)
    assert "SharedAccessKeyName=RootManageSharedAccessKey" in masked
    assert "Endpoint=sb://x.servicebus.windows.net/" in masked
    assert redact("ServiceBusAuthorizationError: Unauthorized access. 'Listen' claim(s) are required") == (
        "ServiceBusAuthorizationError: Unauthorized access. 'Listen' claim(s) are required"
    )
    assert redact("") == ""


def test_redact_traceback_with_connection_string() -> None:
    def connect(conn_str: str) -> None:
        raise ValueError(f"could not connect with {conn_str!r}")

    try:
        connect(REAL)
    except ValueError:
        text = traceback.format_exc()
    assert KEY in text  # the raw traceback leaks it...
    assert KEY not in redact(text)  # ...redact() does not
    assert "contoso.servicebus.windows.net" in redact(text)


def test_redact_masks_a_parsed_key_wherever_it_turns_up() -> None:
    parse_connection_string(REAL)
    # Forms no pattern knows: a tuple repr, a bare value in a log line.
    assert KEY not in redact(repr(("RootManageSharedAccessKey", KEY)))
    assert KEY not in redact(f"retrying with key {KEY} in 2s")


def test_redact_sas_connection_string_repr() -> None:
    text = repr({"conn": f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessSignature={SAS}"})
    masked = redact(text)
    assert SIG not in masked
    assert "contoso.servicebus.windows.net" in masked
