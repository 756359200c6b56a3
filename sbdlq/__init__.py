"""sbdlq: operate Azure Service Bus dead-letter queues from a terminal, a script or cron."""

__version__ = "0.1.0"
