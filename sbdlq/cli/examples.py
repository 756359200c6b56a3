"""The examples each command's `--help` ends with (Typer's `epilog`), as gh and az show them.

One table, keyed by the command's path under `sbdlq`; the DLQ commands are written once and
shown with `transfer-dlq` in front on that group. `attach` sets the epilogs on the app after
every command is registered, so the command modules carry none of this.
"""

from __future__ import annotations

from typing import Any

#: command path → two or three command lines a person can paste (on `sbdlq emulator demo`'s namespace)
EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ("sbdlq emulator demo", "sbdlq count", "sbdlq inspect-reason orders"),
    "transfer-dlq": ("sbdlq transfer-dlq count", "sbdlq transfer-dlq peek hop5"),
    "count": (
        "sbdlq count",
        "sbdlq count orders events --fail-above 100 -o none",
        "sbdlq count --watch 5s",
    ),
    "peek": (
        "sbdlq peek orders --reason ValidationFailed",
        "sbdlq peek orders --older-than 2h --all -o jsonl",
        "sbdlq peek events/Subscriptions/billing --max 5 -o json",
    ),
    "inspect-reason": (
        "sbdlq inspect-reason orders",
        "sbdlq inspect-reason orders --by fingerprint",
        "sbdlq inspect-reason --by entity",
    ),
    "resubmit": (
        "sbdlq resubmit orders --reason DownstreamTimeout --dry-run",
        "sbdlq resubmit orders --reason DownstreamTimeout --spread 2h",
        "sbdlq resubmit orders --to hop1 --max 10 --new-message-id",
    ),
    "purge": (
        "sbdlq purge orders --older-than 7d --dry-run",
        "sbdlq purge orders --reason PaymentDeclined --export declined.jsonl --yes",
    ),
    "replay": (
        "sbdlq replay declined.jsonl --to orders --dry-run",
        "sbdlq replay declined.jsonl --to orders --set-property retried=true",
        "sbdlq replay declined.jsonl --to orders --resume",
    ),
    "spread": ("sbdlq spread list", "sbdlq spread status 20261128T214957Z-3f9a0c"),
    "spread list": ("sbdlq spread list", "sbdlq spread list -o json"),
    "spread status": (
        "sbdlq spread status 20261128T214957Z-3f9a0c",
        "sbdlq spread status 20261128T214957Z-3f9a0c -o json",
    ),
    "spread cancel": (
        "sbdlq spread cancel 20261128T214957Z-3f9a0c --export held.jsonl",
        "sbdlq spread cancel 20261128T214957Z-3f9a0c --to hop1",
    ),
    "routing": ("sbdlq routing status checkout", "sbdlq routing enable-targeted checkout --dry-run"),
    "routing status": ("sbdlq routing status checkout", "sbdlq routing status checkout -o json"),
    "routing enable-targeted": (
        "sbdlq routing enable-targeted checkout --dry-run",
        "sbdlq routing enable-targeted checkout --yes",
    ),
    "routing disable-targeted": (
        "sbdlq routing disable-targeted checkout --dry-run",
        "sbdlq routing disable-targeted checkout --yes",
        "sbdlq routing disable-targeted checkout --yes --force",
    ),
    "apply": (
        "sbdlq apply policy.yaml --explain",
        "sbdlq apply policy.yaml --dry-run",
        "sbdlq apply /etc/sbdlq/policy.yaml --yes -o none",
    ),
    "ui": ("sbdlq ui", "sbdlq ui orders --read-only"),
    "emulator": ("sbdlq emulator demo", "sbdlq emulator list", "sbdlq emulator serve"),
    "emulator create": ("sbdlq emulator create queue payments", "sbdlq emulator create topic shipments"),
    "emulator init": ("sbdlq emulator init", "sbdlq emulator init --config Config.json"),
    "emulator list": ("sbdlq emulator list", "sbdlq emulator list -o json"),
    "emulator reset": ("sbdlq emulator reset --yes", "sbdlq --emulator ./scratch.db emulator reset --yes"),
    "emulator send": (
        "sbdlq emulator send orders --body '{\"id\": 1}'",
        "sbdlq emulator send orders --count 10 --property tenant=contoso --subject order.created",
    ),
    "emulator receive": (
        "sbdlq emulator receive orders --max 5",
        "sbdlq emulator receive orders --max 3 --dead-letter --reason SchemaError",
    ),
    "emulator demo": ("sbdlq emulator demo", "sbdlq emulator demo --messages 100000"),
    "emulator serve": (
        "sbdlq emulator serve",
        "sbdlq emulator serve --port 5673 --http-port 5301",
        "sbdlq emulator serve --tls",
    ),
    "emulator ca": ("sbdlq emulator ca", "SBDLQ_STATE_DIR=/srv/sbdlq-state sbdlq emulator ca"),
    "emulator delete": (
        "sbdlq emulator delete orders --yes",
        "sbdlq emulator delete events/Subscriptions/billing --yes",
    ),
    "emulator create queue": (
        "sbdlq emulator create queue payments",
        "sbdlq emulator create queue payments --max-delivery-count 5 --forward-to orders",
    ),
    "emulator create topic": (
        "sbdlq emulator create topic shipments",
        "sbdlq emulator create topic shipments --max-message-size 1024",
    ),
    "emulator create subscription": (
        "sbdlq emulator create subscription shipments/Subscriptions/all",
        "sbdlq emulator create subscription shipments/Subscriptions/eu --sql-filter \"region LIKE '%europe'\"",
    ),
    "config": ("sbdlq config list", "sbdlq config show"),
    "config path": ("sbdlq config path", "SBDLQ_CONFIG=./team.yaml sbdlq config path"),
    "config list": ("sbdlq config list", "sbdlq config list -o json"),
    "config show": ("sbdlq config show", "sbdlq --profile prod config show", "sbdlq config show prod -o json"),
}

#: the group `main.register_dlq_commands` binds the DLQ commands to a second time (`main.COMMANDS`)
TRANSFER_DLQ = "transfer-dlq"


def examples_for(path: str) -> tuple[str, ...]:
    """The examples of the command at `path` (`transfer-dlq peek` shows peek's on that group)."""
    group, _, command = path.partition(" ")
    if group == TRANSFER_DLQ and command and command in EXAMPLES:
        return tuple(line.replace("sbdlq ", f"sbdlq {TRANSFER_DLQ} ", 1) for line in EXAMPLES[command])
    return EXAMPLES.get(path, ())


def epilog(path: str) -> str | None:
    """The epilog text: "Examples:" and one `$ ` line each (Typer joins single newlines, so two)."""
    lines = examples_for(path)
    if not lines:
        return None
    # Rich markup: a literal [ must be escaped.
    return "\n\n".join(["Examples:", *(f"$ {line}".replace("[", r"\[") for line in lines)])


def attach(app: Any, prefix: str = "") -> None:
    """Set the epilog of every command and group registered on the Typer `app`, and of `app`
    itself when it is the root, from `EXAMPLES` (the root keeps its own note above them)."""
    if not prefix:
        app.info.epilog = "\n\n".join(filter(None, (app.info.epilog, epilog(""))))
    for info in app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        info.epilog = epilog(f"{prefix}{name}") or info.epilog
    for group in app.registered_groups:
        name = group.name or group.typer_instance.info.name
        group.epilog = epilog(f"{prefix}{name}") or group.epilog
        attach(group.typer_instance, f"{prefix}{name} ")
