"""`sbdlq emulator create queue|topic|subscription` and `emulator delete`: entities without a Config.json."""

from collections.abc import Callable
from typing import Annotated

import typer

from sbdlq import terminal
from sbdlq.cli.emulator_store import emulator_group, emulator_settings, open_store
from sbdlq.cli.error_path import guarded
from sbdlq.cli.options import Yes
from sbdlq.cli.settings import Settings
from sbdlq.emulator.admin import MAX_LOCK_S
from sbdlq.errors import BadInput

create_app = typer.Typer(
    name="create",
    help="Create a queue, topic or subscription in the emulator store (no Config.json needed).",
    no_args_is_help=True,
)

# Service Bus caps a peek-lock at five minutes.

Name = Annotated[str, typer.Argument(help="The entity's name.", show_default=False)]
MaxMessageSize = Annotated[
    str | None,
    typer.Option(
        "--max-message-size",
        help="Largest message it takes (256KB, 10MB; a bare number is KB; default 256KB, Premium allows 100MB).",
        metavar="SIZE",
    ),
]
_SIZE_UNITS = {"": 1, "kb": 1, "k": 1, "mb": 1024, "m": 1024}
# Premium's largest message, 100 MB (Standard's is 256 KB).
MAX_MESSAGE_KB = 100 * 1024


def _seconds(text: str | None, option: str) -> float | None:
    """A duration option in seconds (a bare number is seconds), or None when not given."""
    from sbdlq.timeparse import parse_duration

    if text is None:
        return None
    seconds = parse_duration(text, what=option)
    if seconds <= 0:
        raise BadInput(f"{option} must be positive")
    return seconds


def _kilobytes(text: str | None) -> int | None:
    """--max-message-size in KB (MaxMessageSizeInKilobytes), or None when not given."""
    import re

    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise BadInput(f"invalid --max-message-size {text!r}", hint="use KB or MB: 256KB, 10MB, 100MB")
    kb = int(match.group(1)) * _SIZE_UNITS[unit]
    if not 1 <= kb <= MAX_MESSAGE_KB:
        raise BadInput(f"--max-message-size {text}: Service Bus allows 1KB to 100MB")
    return kb


@create_app.command("queue")
def create_queue(
    ctx: typer.Context,
    name: Name,
    max_delivery_count: Annotated[
        int | None, typer.Option("--max-delivery-count", help="Deliveries before dead-lettering.", min=1)
    ] = None,
    lock_duration: Annotated[
        str | None, typer.Option("--lock-duration", help="Peek-lock duration (30s, 1m; default 60s).")
    ] = None,
    requires_session: Annotated[bool, typer.Option("--requires-session", help="Messages need a session id.")] = False,
    forward_to: Annotated[
        str | None, typer.Option("--forward-to", help="Forward every message to this queue or topic.")
    ] = None,
    dead_letter_on_expiration: Annotated[
        bool, typer.Option("--dead-letter-on-expiration", help="Expired messages go to the DLQ.")
    ] = False,
    ttl: Annotated[str | None, typer.Option("--ttl", help="Default message time to live (1h, 7d).")] = None,
    max_message_size: MaxMessageSize = None,
) -> None:
    """Create a queue."""

    async def work(s: Settings) -> None:
        lock_s = _seconds(lock_duration, "--lock-duration")
        if lock_s is not None and lock_s > MAX_LOCK_S:
            raise BadInput(f"--lock-duration {lock_duration}: Service Bus allows at most 5m")
        props = {
            "max_delivery_count": max_delivery_count,
            "lock_duration_s": lock_s,
            "default_ttl_s": _seconds(ttl, "--ttl"),
            "forward_to": forward_to,
            "requires_session": requires_session or None,
            "dead_lettering_on_expiration": dead_letter_on_expiration or None,
            "max_message_size_kb": _kilobytes(max_message_size),
        }
        async with open_store(emulator_settings(s), create=True) as store:
            store.create_queue(name, **{k: v for k, v in props.items() if v is not None})

    guarded(ctx, work)
    typer.echo(f"created queue {name}")


@create_app.command("topic")
def create_topic(ctx: typer.Context, name: Name, max_message_size: MaxMessageSize = None) -> None:
    """Create a topic (add subscriptions with `create subscription TOPIC/Subscriptions/SUB`)."""

    async def work(s: Settings) -> None:
        kb = _kilobytes(max_message_size)
        async with open_store(emulator_settings(s), create=True) as store:
            store.create_topic(name, **({} if kb is None else {"max_message_size_kb": kb}))

    guarded(ctx, work)
    typer.echo(f"created topic {name}")


@create_app.command("subscription")
def create_subscription(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="TOPIC/Subscriptions/SUB (the topic must exist).", show_default=False)],
    sql_filter: Annotated[
        str | None,
        typer.Option("--sql-filter", help="Take only messages matching this SQL filter (default: every message)."),
    ] = None,
) -> None:
    """Create a subscription of an existing topic."""
    from sbdlq.addresses import parse_entity

    async def work(s: Settings) -> str:
        entity = parse_entity(path)
        async with open_store(emulator_settings(s)) as store:
            try:
                store.create_subscription(entity, sql_filter)
            except BadInput as exc:
                if sql_filter is None:
                    raise
                raise BadInput(f"invalid --sql-filter {sql_filter!r}: {exc.message}", hint=exc.hint) from None
        return str(entity)

    created = guarded(ctx, work)
    typer.echo(f"created subscription {created}" + (f" (filter: {sql_filter})" if sql_filter else ""))


def delete(
    ctx: typer.Context,
    entity: Annotated[str, typer.Argument(help="Queue, topic, or TOPIC/Subscriptions/SUB.", show_default=False)],
    yes: Yes = False,
) -> None:
    """Delete a queue, topic (with its subscriptions) or subscription, and its messages."""
    from sbdlq.addresses import parse_entity

    async def work(s: Settings) -> tuple[str, str]:
        path = parse_entity(entity)
        terminal.must_ask(yes, BadInput(f"delete removes {path} and its messages; pass --yes to confirm"))
        async with open_store(emulator_settings(s)) as store:
            if not yes:
                terminal.confirm(f"Delete {path} and its messages?", declined="delete cancelled; nothing was deleted")
            info = store.delete(path)
        return info.kind, info.path

    kind, deleted = guarded(ctx, work)
    typer.echo(f"deleted {kind} {deleted} and its messages")


#: what this module adds to the `emulator` group (which commands/emulator.py owns and adds to
#: the root), by the name the user types: a group (`create`) or a command (`delete`)
COMMANDS: dict[str, typer.Typer | Callable[..., None]] = {"create": create_app, "delete": delete}


def register(parent: typer.Typer, name: str) -> None:
    """Add each of `COMMANDS` to the group `name` (`emulator`), in order; `parent` holds that group."""
    for command, target in COMMANDS.items():
        if isinstance(target, typer.Typer):
            emulator_group.add_typer(target, name=command)
        else:
            emulator_group.command(command)(target)
