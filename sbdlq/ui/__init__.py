"""`sbdlq ui`: the DLQ console (Textual), over `sbdlq.operations` like the commands.

Textual is the optional extra `sbdlq[ui]`; nothing here is imported by other commands, and
only `app` and the pane modules import Textual.
"""
