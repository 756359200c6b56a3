"""The DLQ operations, written once against the Backend interface."""
