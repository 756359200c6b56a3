"""What sbdlq writes: the `-o` formats (`formats.py`), tables, encoders and progress (`render.py`),
Prometheus text (`prometheus.py`), the message tables (`message_table.py`) and the tables several
commands share (`report_tables.py`)."""
