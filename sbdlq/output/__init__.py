"""What sbdlq writes: the `-o` formats (`formats.py`), tables, encoders and progress (`render.py`),
Prometheus text (`prometheus.py`) and the message tables (`message_table.py`)."""
