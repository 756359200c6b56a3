"""Shell-completion callbacks: entity names from the emulator store, profile names from the config.

Completion runs on every TAB, so these never touch the network, never create a store,
give up after COMPLETION_DEADLINE_S, and answer [] on any error instead of printing one.
"""

import threading
from collections.abc import Callable

import click

# Long enough for a store on a slow disk, short enough that a TAB never feels stuck.
COMPLETION_DEADLINE_S = 1.0
_TARGET_PARAMS = ("connection_string", "namespace", "emulator", "profile")


def complete_entity(ctx: click.Context, incomplete: str) -> list[str]:
    """Queues and subscriptions (the entities that have a DLQ) of the current emulator store."""
    return _complete(ctx, incomplete, ("queue", "subscription"))


def complete_destination(ctx: click.Context, incomplete: str) -> list[str]:
    """Queues and topics (what a message can be sent to) of the current emulator store."""
    return _complete(ctx, incomplete, ("queue", "topic"))


def complete_profile(ctx: click.Context, incomplete: str) -> list[str]:
    """Profile names from the config file."""
    try:
        from sbdlq.profiles import load_config

        cfg = load_config()
    except Exception:
        return []
    return _matching(list(cfg.profiles) if cfg else [], incomplete)


def complete_output(ctx: click.Context, incomplete: str) -> list[str]:
    """The output formats every command offers (`-o`)."""
    from sbdlq.output.formats import outputs

    return _matching(list(outputs()), incomplete)


def complete_count_output(ctx: click.Context, incomplete: str) -> list[str]:
    """The output formats of `count -o`: every command's and those offered to count by name (prometheus)."""
    from sbdlq.output.formats import outputs

    return _matching(list(outputs("count")), incomplete)


def complete_apply_output(ctx: click.Context, incomplete: str) -> list[str]:
    """The output formats of `apply -o`: its report is nested (no tsv), and prometheus is offered to it by name."""
    from sbdlq.output.formats import outputs

    # As typed (case-sensitive), as apply has always completed it.
    return [fmt for fmt in outputs("apply", nested=True) if fmt.startswith(incomplete)]


def complete_group_by(ctx: click.Context, incomplete: str) -> list[str]:
    """The groupings of inspect-reason (`--by`); `property:` is completed up to the name the user types."""
    from sbdlq.operations.browse import grouping_words

    return _matching(grouping_words(""), incomplete)


def _complete(ctx: click.Context, incomplete: str, kinds: tuple[str, ...]) -> list[str]:
    try:
        store = _emulator_store(ctx)
        if store is None:
            return []
        from sbdlq.emulator.admin import entity_names

        names = _within_deadline(lambda: entity_names(store, kinds))
    except Exception:
        return []
    return _matching(names, incomplete)


def _matching(names: list[str], incomplete: str) -> list[str]:
    # Entity paths are case-insensitive in Service Bus, so `ORD` completes `orders`.
    prefix = incomplete.lower()
    return [n for n in names if n.lower().startswith(prefix)]


def _emulator_store(ctx: click.Context) -> str | None:
    """The emulator store the command line would use, if the target is an existing store."""
    from sbdlq.cli.settings import given_setting
    from sbdlq.profiles import Setting, resolve_target

    root = ctx.find_root()
    options = {key: given_setting(root, key) for key in _TARGET_PARAMS if key in root.params}
    target = resolve_target(options=options, profile_name=options.get("profile", Setting(None)).value)
    if target.kind != "emulator":
        return None  # a real namespace: listing it is a network call
    from pathlib import Path

    # Never create a store just because someone pressed TAB.
    return target.value if Path(target.value).is_file() else None


def _within_deadline(work: Callable[[], list[str]]) -> list[str]:
    """work() in a daemon thread; [] when it fails or outlives the deadline (a busy store)."""
    result: list[str] = []

    def run() -> None:
        try:
            result.extend(work())
        except Exception:
            pass  # no suggestions rather than an error in the middle of a command line

    thread = threading.Thread(target=run, name="sbdlq-complete", daemon=True)
    thread.start()
    thread.join(COMPLETION_DEADLINE_S)
    return [] if thread.is_alive() else list(result)
