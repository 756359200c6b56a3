"""The command modules: one per top-level command or group, named after it, each with one
`register(parent, name)` that `cli/main.py` calls from its one list of commands.
"""
