"""The command modules. Each holds one of:

- a top-level command or group, named after it (apply.py, ui.py; the groups config.py,
  routing.py, spread.py, emulator.py);
- a family of top-level commands that share their options and code, named after the family
  (dlq.py: count, peek, inspect-reason and purge, the DLQ commands that read; copies.py:
  resubmit and replay, the commands that send copies);
- a part of a group another module owns (emulator_entities.py: `emulator create ...` and
  `emulator delete`, added to emulator.py's group).

Each declares `COMMANDS`, what it adds by the name the user types (a command's function or a
group's Typer app; for a part of a group, the subcommands it adds to that group), and has one
`register(parent, name)` that adds `COMMANDS[name]` to `parent` (a part of a group: each of
its `COMMANDS`, to its group). cli/main.py `COMMANDS` names each top-level command, its line in
the root's help and the modules that add it, and calls their `register` when the command runs;
each imports nothing heavy at its top (tests/cli/test_command_modules.py).
"""
