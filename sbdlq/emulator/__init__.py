"""sbdlq's local emulator: Service Bus semantics over one SQLite file."""
