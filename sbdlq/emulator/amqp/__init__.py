"""AMQP 1.0 listener exposing the emulator engine to unmodified Service Bus SDKs.

Importing this package does not import proton; `server.serve` is the entry point.
"""
