"""`sbdlq emulator ...`: create, fill, inspect and serve the local emulator store.

These commands act on the emulator store only (`--emulator PATH`, SBDLQ_EMULATOR, a
profile's `emulator`, else the user data dir). `init` and `demo` create the store; the
others need it to exist.
"""

import dataclasses
import shlex
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sbdlq import interrupts, terminal
from sbdlq.cli.emulator_store import NO_STORE_HINT, emulator_group, emulator_settings, open_store, store_path
from sbdlq.cli.error_path import guarded, handled
from sbdlq.cli.notes import err
from sbdlq.cli.options import Output
from sbdlq.cli.serve_options import (
    AuthTimeoutOption,
    CertKeyOption,
    CertOption,
    ConfigOption,
    KeyFileOption,
    KeyOption,
    MaxConnectionsOption,
    QuotasOption,
    TlsOption,
    TlsPortOption,
)
from sbdlq.cli.settings import Settings, output_format
from sbdlq.cli.target import open_target
from sbdlq.connstr import is_loopback as _is_loopback
from sbdlq.emulator import discovery
from sbdlq.emulator.signals import stop_on_signals
from sbdlq.errors import BadInput, OperationFailed

if TYPE_CHECKING:
    from sbdlq.addresses import Address
    from sbdlq.emulator.admin import Quotas
    from sbdlq.emulator.amqp.limits import Limits
    from sbdlq.emulator.config_json import EmulatorConfig
    from sbdlq.emulator.tls import TlsFiles

app = emulator_group  # shared with commands/emulator_entities.py, which adds `create` and `delete`

MSG = "Message"
SendTo = Annotated[str, typer.Argument(help="Queue or topic.", show_default=False)]
ReceiveFrom = Annotated[
    str,
    typer.Argument(
        help="Queue, or TOPIC/Subscriptions/SUB (a /$DeadLetterQueue suffix reads the DLQ).", show_default=False
    ),
]

# ---------------------------------------------------------------------- init / list / reset


@app.command("init")
def init(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="A Config.json in Microsoft's emulator format (comments allowed) to apply.", metavar="FILE"
        ),
    ] = None,
) -> None:
    """Create the store; with --config, create or update its entities (messages are kept)."""
    from sbdlq.emulator.admin import check_new_config
    from sbdlq.emulator.config_json import Applied, EmulatorConfig, load_config

    async def work(s: Settings) -> tuple[str, bool, EmulatorConfig | None, list[Applied], int]:
        cfg = load_config(config) if config is not None else None
        local = emulator_settings(s)
        path = store_path(local)
        existed = Path(path).exists()
        if cfg is not None and not existed:
            check_new_config(cfg)
        async with open_store(local, create=True) as store:
            applied = store.apply_config(cfg) if cfg is not None else []
            return path, existed, cfg, applied, store.entity_count()

    path, existed, cfg, applied, total = guarded(ctx, work)
    if cfg is None:
        if existed:
            typer.echo(
                f"emulator store {path} already exists ({_plural(total, 'entity', 'entities')}); nothing changed"
            )
        else:
            typer.echo(f"created emulator store {path} (empty namespace)")
        return
    typer.echo(f"emulator store {path} already exists" if existed else f"created emulator store {path}")
    for a in applied:
        rules = f" ({_plural(a.rules, 'rule')})" if a.kind == "subscription" else ""
        typer.echo(f"{'created' if a.created else 'updated'} {a.kind} {a.path}{rules}")
    typer.echo(_applied_line(cfg))


def _applied_line(cfg: "EmulatorConfig") -> str:
    """What applying a Config.json declared, in one line."""
    return (
        f"applied {cfg.source} (namespace {cfg.namespace}): {_plural(len(cfg.queues), 'queue')}, "
        f"{_plural(len(cfg.topics), 'topic')}, {_plural(len(cfg.subscriptions), 'subscription')}, "
        f"{_plural(cfg.rule_count, 'rule')}"
    )


@app.command("list")
def list_(ctx: typer.Context, output: Output = None) -> None:
    """Every queue, topic and subscription with its message counts (topics: subscription count)."""

    from sbdlq.emulator.admin import LIST_COLUMNS

    async def work(s: Settings) -> tuple[str, str, list[dict[str, Any]]]:
        fmt = output_format(s, output)
        local = emulator_settings(s)
        async with open_store(local) as store:
            rows = store.list_entities()
        return fmt, store_path(local), [r.to_json() for r in rows]

    fmt, path, rows = guarded(ctx, work)
    from sbdlq.output.formats import draws_table, write_document

    if not draws_table(fmt, None):
        write_document(rows, fmt)
        return
    if not rows:
        typer.echo(f"no entities in {path} ({NO_STORE_HINT.replace('create one', 'create some')})")
        return
    from sbdlq.output.render import table

    table(LIST_COLUMNS, [[r[c] for c in LIST_COLUMNS] for r in rows])


@app.command("reset")
def reset(
    ctx: typer.Context,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Confirm: delete every entity and message.")] = False,
) -> None:
    """Delete every entity and message in the store."""

    async def work(s: Settings) -> tuple[str, int]:
        local = emulator_settings(s)
        path = store_path(local)
        terminal.must_ask(yes, BadInput(f"reset deletes every entity and message in {path}; pass --yes to confirm"))
        async with open_store(local) as store:
            if not yes:
                _confirm_reset(path, store.entity_count())
            return path, store.reset()

    path, n = guarded(ctx, work)
    typer.echo(f"reset {path}: deleted {_plural(n, 'entity', 'entities')} and their messages")


def _confirm_reset(path: str, entities: int) -> None:
    """Ask on the terminal, with the number of entities that would go."""
    terminal.confirm(
        f"Delete {_plural(entities, 'entity', 'entities')} and their messages in {path}?",
        declined="reset cancelled; nothing was deleted",
    )


# ---------------------------------------------------------------------- send


@app.command("send")
def send(
    ctx: typer.Context,
    entity: SendTo,
    body: Annotated[str | None, typer.Option("--body", help="The body text (UTF-8).", rich_help_panel=MSG)] = None,
    body_file: Annotated[
        str | None,
        typer.Option("--body-file", help="Read the body from FILE ('-': stdin).", metavar="FILE", rich_help_panel=MSG),
    ] = None,
    count: Annotated[int, typer.Option("--count", help="Send N copies.", min=1)] = 1,
    subject: Annotated[str | None, typer.Option("--subject", help="Subject (label).", rich_help_panel=MSG)] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            help="Application property K=V (repeatable). V is typed: 42 → int, 1.5 → float, "
            "true/false → bool, else a string; quote it to force a string: K='\"42\"'.",
            rich_help_panel=MSG,
        ),
    ] = None,
    message_id: Annotated[
        str | None,
        typer.Option("--message-id", help="Message id; with --count N: ID-1 … ID-N.", rich_help_panel=MSG),
    ] = None,
    session_id: Annotated[str | None, typer.Option("--session-id", help="Session id.", rich_help_panel=MSG)] = None,
    ttl: Annotated[
        str | None, typer.Option("--ttl", help="Time to live (30s, 5m, PT1H).", metavar="DURATION", rich_help_panel=MSG)
    ] = None,
    content_type: Annotated[
        str | None, typer.Option("--content-type", help="Content type.", rich_help_panel=MSG)
    ] = None,
    correlation_id: Annotated[
        str | None, typer.Option("--correlation-id", help="Correlation id.", rich_help_panel=MSG)
    ] = None,
    scheduled_at: Annotated[
        str | None,
        typer.Option(
            "--scheduled-at",
            help="Enqueue later: ISO 8601 time, or a duration from now (10m).",
            metavar="TIME",
            rich_help_panel=MSG,
        ),
    ] = None,
) -> None:
    """Send messages to a queue or topic, as a producer would."""
    from sbdlq.addresses import parse_entity
    from sbdlq.models import OutboundMessage

    async def work(s: Settings) -> tuple[str, int, datetime | None]:
        from sbdlq.property_values import parse_properties

        path = parse_entity(entity)
        if path.is_subscription:
            raise BadInput(f"cannot send to subscription {str(path)!r}", hint=f"send to its topic {path.name!r}")
        if body is not None and body_file is not None:
            raise BadInput("give --body or --body-file, not both")
        payload = _read_body(body_file) if body_file is not None else (body or "").encode("utf-8")
        props = parse_properties(prop or [])
        ttl_s = _parse_ttl(ttl) if ttl is not None else None
        when = parse_schedule(scheduled_at) if scheduled_at is not None else None
        message = OutboundMessage(
            body=payload,
            message_id=message_id,
            subject=subject,
            session_id=session_id,
            content_type=content_type,
            correlation_id=correlation_id,
            time_to_live_s=ttl_s,
            scheduled_enqueue_time=when,
            application_properties=props,
        )
        async with open_store(emulator_settings(s)) as store:
            accepted = store.send(path, message, count=count)
        return str(path), accepted, when

    path, accepted, when = guarded(ctx, work)
    typer.echo(_sent_line(path, count, accepted, when))


def _sent_line(path: str, count: int, accepted: int, when: datetime | None) -> str:
    line = f"sent {count} message(s) to {path}"
    notes = []
    if when is not None:
        from sbdlq.models import iso

        notes.append(f"scheduled for {iso(when)}")
    if accepted < count:
        notes.append(f"{count - accepted} dropped as duplicates")
    return line + (f" ({'; '.join(notes)})" if notes else "")


def _parse_ttl(text: str) -> float:
    from sbdlq.timeparse import parse_duration

    seconds = parse_duration(text, what="--ttl")
    if seconds <= 0:
        raise BadInput(f"--ttl must be positive, got {text!r}")
    return seconds


def parse_schedule(text: str, *, now: datetime | None = None) -> datetime:
    """--scheduled-at: a duration from now, or an ISO 8601 time (naive = UTC)."""
    from sbdlq.timeparse import parse_duration, parse_time

    current = now or datetime.now(UTC)
    try:
        return current + timedelta(seconds=parse_duration(text))
    except BadInput:
        pass
    try:
        return parse_time(text, what="--scheduled-at")
    except BadInput:
        raise BadInput(
            f"invalid --scheduled-at {text!r}", hint="use ISO 8601 like 2026-01-31T12:00:00Z or a duration like 10m"
        )


def _read_body(source: str) -> bytes:
    if source == "-":
        return sys.stdin.buffer.read()
    from sbdlq.named_files import read_named_file

    return read_named_file(source, f"--body-file {source}")


# ---------------------------------------------------------------------- receive

_ACTIONS = ("--complete", "--abandon", "--dead-letter", "--defer")
_VERBS = {"--complete": "completed", "--abandon": "abandoned", "--dead-letter": "dead-lettered", "--defer": "deferred"}


@app.command("receive")
def receive(
    ctx: typer.Context,
    entity: ReceiveFrom,
    max_count: Annotated[int, typer.Option("--max", help="Receive at most N messages.", min=1)] = 1,
    complete: Annotated[bool, typer.Option("--complete", help="Complete them (remove).")] = False,
    abandon: Annotated[bool, typer.Option("--abandon", help="Abandon them (delivery count +1).")] = False,
    dead_letter: Annotated[bool, typer.Option("--dead-letter", help="Move them to the dead-letter queue.")] = False,
    defer: Annotated[bool, typer.Option("--defer", help="Defer them.")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Dead-letter reason (with --dead-letter).")] = None,
    description: Annotated[
        str | None, typer.Option("--description", help="Dead-letter description (with --dead-letter).")
    ] = None,
    sub_queue: Annotated[
        str | None,
        typer.Option("--sub-queue", help="Read deadletter or transferdeadletter instead of the entity."),
    ] = None,
    output: Output = None,
) -> None:
    """Receive with a peek-lock and settle, as a consumer would (exactly one action)."""
    from sbdlq.emulator.admin import Settle, receive_and_settle
    from sbdlq.models import Message

    chosen = [flag for flag, on in zip(_ACTIONS, (complete, abandon, dead_letter, defer), strict=True) if on]

    async def work(s: Settings) -> tuple[str, str, str, list[Message]]:
        if len(chosen) != 1:
            if chosen:
                raise BadInput(f"choose one action, not {' and '.join(chosen)}")
            raise BadInput("say what to do with the messages: --complete, --abandon, --dead-letter or --defer")
        action = chosen[0]
        if action != "--dead-letter" and (reason is not None or description is not None):
            raise BadInput("--reason and --description go with --dead-letter")
        address = _receive_address(entity, sub_queue)
        fmt = output_format(s, output)
        async with open_target(emulator_settings(s)) as backend:
            got = await receive_and_settle(
                backend, address, max_count, Settle(action.removeprefix("--")), reason=reason, description=description
            )
        return fmt, str(address), action, got

    fmt, where, action, got = guarded(ctx, work)
    summary = f"{_VERBS[action]} {len(got)} message(s) from {where}"
    if action == "--dead-letter" and got and reason:
        summary += f" (reason {reason})"
    from sbdlq.output.formats import draws_table, write_document
    from sbdlq.output.message_table import RECEIVE_COLUMNS, table_columns, table_row, tsv_keys

    if not draws_table(fmt, None):
        # tsv: the table's columns, with full values.
        write_document([m.to_json() for m in got], fmt, columns=tsv_keys(RECEIVE_COLUMNS))
        err(summary)
        return
    if not got:
        typer.echo(f"no messages available in {where}")
        return
    from sbdlq.output.render import table

    table(table_columns(RECEIVE_COLUMNS), [table_row(RECEIVE_COLUMNS, m, _preview(m.body)) for m in got])
    typer.echo(summary)


def _receive_address(entity: str, sub_queue: str | None) -> "Address":
    from sbdlq.addresses import Address, SubQueue, parse_address

    address = parse_address(entity)
    if sub_queue is None:
        return address
    try:
        wanted = SubQueue(sub_queue.lower())
    except ValueError:
        raise BadInput(f"invalid --sub-queue {sub_queue!r}", hint="use deadletter or transferdeadletter")
    if address.sub_queue not in (SubQueue.NONE, wanted):
        raise BadInput(f"{entity!r} names another sub-queue than --sub-queue {sub_queue}")
    return Address(address.entity, wanted)


def _preview(body: bytes, n: int = 40) -> str:
    from sbdlq.models import body_text

    text, enc = body_text(body)
    if enc != "utf-8":
        return f"<{len(body)} bytes>"
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[: n - 1] + "…"


# ---------------------------------------------------------------------- demo


@app.command("demo")
def demo(
    ctx: typer.Context,
    messages: Annotated[
        int | None,
        typer.Option(
            "--messages",
            # demo.DEFAULT_MESSAGES, written out: importing the demo here would load the engine on every
            # start (a test holds them equal). `\[`: Rich markup took `[default: ...]` for a tag and hid it.
            help="Dead-lettered messages to seed, in the same mix of entities and reasons \\[default: 264].",
            min=1,
            metavar="N",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Fill the store with a realistic namespace whose DLQs hold every kind of failure."""
    from sbdlq.emulator.demo import ORDERS, DemoSummary

    async def work(s: Settings) -> tuple[str, str, DemoSummary]:
        local = emulator_settings(s)
        async with open_store(local, create=True) as store:
            summary = store.demo(messages)
        target = local.target()
        return store_path(local), target.source, summary

    path, source, summary = guarded(ctx, work)
    if summary.reset:
        typer.echo(f"reset the demo entities that already existed: {', '.join(summary.reset)}")
    typer.echo(f"demo: {_plural(len(summary.entities), 'entity', 'entities')} in {path}")
    reasons = summary.orders_reasons
    typer.echo(
        f"  {ORDERS}: {sum(reasons.values())} in the DLQ ({len(reasons)} reasons: {_reasons(reasons)}), "
        f"{summary.orders_active} active, {summary.orders_scheduled} scheduled"
    )
    for entity, by_reason in summary.dead_letters.items():
        if entity != ORDERS:
            typer.echo(f"  {entity}: {sum(by_reason.values())} in the DLQ ({_reasons(by_reason)})")
    for entity, by_reason in summary.transfer.items():
        typer.echo(f"  {entity}: {sum(by_reason.values())} in the transfer DLQ ({_reasons(by_reason)})")
    prefix = f"sbdlq --emulator {shlex.quote(path)} " if source == "option" else "sbdlq "
    typer.echo(f"try: {prefix}inspect-reason {ORDERS}")


def _reasons(by_reason: dict[str, int]) -> str:
    if len(by_reason) == 1:
        return next(iter(by_reason))
    return ", ".join(f"{reason} {n}" for reason, n in by_reason.items())


# ---------------------------------------------------------------------- serve


@app.command("serve")
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="AMQP port (0: any free port).", min=0, max=65535)] = 5672,
    http_port: Annotated[
        int, typer.Option("--http-port", help="HTTP port for admin clients (0: any free port).", min=0, max=65535)
    ] = 5300,
    key: KeyOption = None,
    key_file: KeyFileOption = None,
    max_connections: MaxConnectionsOption = None,
    quotas: QuotasOption = "generous",
    auth_timeout: AuthTimeoutOption = 10.0,
    tls: TlsOption = False,
    tls_port: TlsPortOption = 5671,
    cert: CertOption = None,
    cert_key: CertKeyOption = None,
    config: ConfigOption = None,
) -> None:
    """Serve the store over AMQP 1.0 to any Service Bus SDK (UseDevelopmentEmulator=true; --tls: any client)."""
    with handled(ctx) as s:
        from sbdlq.emulator.amqp.limits import resolve_key

        files = _tls_files(tls, cert, cert_key)
        key = resolve_key(key, key_file)
        limits = _limits(quotas, max_connections, auth_timeout)
        local = emulator_settings(s)
        if not key and not _is_loopback(host):
            raise BadInput(
                f"refusing to serve {host} without a key",
                hint="pass --key or set SBDLQ_EMULATOR_KEY so clients must sign, or bind 127.0.0.1",
            )
        path = store_path(local)
        server = _server_module()
        _store_to_serve(path, config, limits.quotas)
        stop = threading.Event()
        on_air = _OnAir(host, keyed=bool(key), files=files)

        interrupts.begin_work()
        try:
            with stop_on_signals(stop):
                server.serve(
                    path,
                    host=host,
                    port=port,
                    key=key,
                    http_port=http_port,
                    ready=on_air.ready,
                    stop_event=stop,
                    limits=limits,
                    tls=files,
                    tls_port=tls_port,
                    tls_ready=on_air.secure.append,
                )
        finally:
            for found_at in on_air.announced:
                discovery.withdraw(found_at)


def _limits(quotas: str, max_connections: int | None, auth_timeout: float) -> "Limits":
    """serve's limits: the quota set named, and --max-connections (default: the set's, else 1,000)."""
    from sbdlq.emulator.admin import quota_set
    from sbdlq.emulator.amqp.limits import MAX_CONNECTIONS, Limits

    chosen = quota_set(quotas)
    if max_connections is None:
        max_connections = chosen.connections or MAX_CONNECTIONS
    return Limits(max_connections=max_connections, auth_timeout_s=auth_timeout, quotas=chosen)


def _store_to_serve(path: str, config: Path | None, quotas: "Quotas") -> None:
    """The store must exist; with a Config.json, it is applied first (the store made if missing)."""
    if config is None:
        if not Path(path).exists():
            raise BadInput(f"no emulator store at {path}", hint=NO_STORE_HINT)
        return
    from sbdlq.emulator.admin import apply_at_start
    from sbdlq.emulator.config_json import load_config

    cfg = load_config(config)
    apply_at_start(path, cfg, quotas)
    sys.stdout.write(_applied_line(cfg) + "\n")


@dataclasses.dataclass
class _OnAir:
    """What serve does once it listens: record its ports for sbdlq clients and say how to reach it."""

    host: str
    keyed: bool
    files: "TlsFiles | None"
    announced: list[Path] = dataclasses.field(default_factory=list)
    secure: list[int] = dataclasses.field(default_factory=list)  # the AMQPS port, once it listens

    def ready(self, amqp_port: int, web_port: int | None) -> None:
        host, files = self.host, self.files
        http = f" ({'https' if files else 'http'} {host}:{web_port})" if web_port is not None else ""
        amqps = f", amqps://{host}:{self.secure[0]}" if self.secure else ""
        # sbdlq clients given only the connection string find the HTTP port (and TLS) in this file.
        found_at = None
        if web_port is not None:
            ca = files.ca if files else None
            found_at = discovery.announce(host, amqp_port, web_port, https=files is not None, ca=ca)
        self.announced.extend([found_at] if found_at else [])
        sys.stdout.write(f"listening on amqp://{host}:{amqp_port}{amqps}{http}\n")
        sys.stdout.write(_connection_string_line(host, amqp_port, web_port, keyed=self.keyed, announced=bool(found_at)))
        if files is not None and self.secure:
            sys.stdout.write(_tls_lines(host, self.secure[0], web_port, files, keyed=self.keyed))
        sys.stdout.flush()


def _connection_string_line(
    host: str, amqp_port: int, web_port: int | None, *, keyed: bool, announced: bool = False
) -> str:
    """What a client passes to reach this server (never the key itself), and the HTTP port if not
    5300 and sbdlq cannot find it by itself (the discovery file could not be written)."""
    reach = "localhost" if host in ("0.0.0.0", "::", "") else host
    # Without a key any SAS key is accepted; with one, the client signs with it.
    secret = "<the key>" if keyed else "SAS_KEY_VALUE"
    line = (
        f"connection string: Endpoint=sb://{reach}:{amqp_port};SharedAccessKeyName=RootManageSharedAccessKey;"
        f"SharedAccessKey={secret};UseDevelopmentEmulator=true\n"
    )
    if web_port is not None and web_port != 5300 and not announced:
        line += f"admin clients: export SBDLQ_EMULATOR_HTTP_PORT={web_port}\n"
    return line


def _tls_files(tls: bool, cert: str | None, cert_key: str | None) -> "TlsFiles | None":
    """What --tls serves: the user's --cert/--cert-key, else the local CA's (made on first use)."""
    from sbdlq.emulator import tls as tls_files

    if (cert is None) != (cert_key is None):
        raise BadInput("--cert and --cert-key go together", hint="give the certificate and its private key")
    if cert is not None and cert_key is not None:
        return tls_files.user_files(cert, cert_key)
    return tls_files.local_files() if tls else None


def _tls_lines(host: str, tls_port: int, web_port: int | None, files: "TlsFiles", *, keyed: bool) -> str:
    """How TLS clients reach this server and trust its certificate (never the key itself)."""
    reach = "localhost" if host in ("0.0.0.0", "::", "", "127.0.0.1") else host
    secret = "<the key>" if keyed else "SAS_KEY_VALUE"
    # The AMQPS port answers HTTPS too (emulator/amqp/handoff.py): Node dials AMQPS and every admin client
    # HTTPS on the endpoint's port, and the Python SDK's AMQP client 5671 whatever it names.
    string = f"Endpoint=sb://{reach}:{tls_port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={secret}"
    lines = [f"TLS clients: {string}"]
    if web_port is None:
        lines[0] += " (AMQPS only: no HTTP side)"
    if tls_port != 5671:
        lines.append(f"  Python SDK's AMQP client: also custom_endpoint_address='sb://{reach}:{tls_port}'")
    if files.ca is None:
        lines.append(f"TLS: serving your certificate {files.cert}")
        return "".join(line + "\n" for line in lines)
    ca = shlex.quote(str(files.ca))
    # What adds to the trusted CAs first; the variables that replace them last, with the
    # warning: in a shell that exports them, real Azure's certificates fail to verify.
    lines += [
        f"trust the emulator's CA {files.ca}:",
        f"  Python SDK: connection_verify={str(files.ca)!r} (ServiceBusClient, ServiceBusAdministrationClient)",
        f"  Node.js: export NODE_EXTRA_CA_CERTS={ca} (added to the CAs Node trusts)",
        f"  OpenSSL, requests: SSL_CERT_FILE={ca} REQUESTS_CA_BUNDLE={ca} replace the system's CAs: "
        "set them for one command, never in a shell that also reaches Azure",
    ]
    return "".join(line + "\n" for line in lines)


@app.command("ca")
def ca(ctx: typer.Context) -> None:
    """Print the path of the local CA certificate `serve --tls` uses (made now if missing)."""
    with handled(ctx):
        from sbdlq.emulator import tls as tls_files

        interrupts.begin_work()
        found = tls_files.local_files().ca
        assert found is not None  # the local files always name their CA
        typer.echo(str(found))


def _server_module() -> Any:
    """The AMQP listener, imported only now: proton is an optional dependency."""
    import importlib

    try:
        return importlib.import_module("sbdlq.emulator.amqp.server")
    except ImportError as exc:
        missing = exc.name or ""
        if missing == "proton" or missing.startswith(("proton.", "_cproton", "sbdlq.emulator.amqp")):
            raise OperationFailed(
                "`sbdlq emulator serve` needs python-qpid-proton", hint="pip install 'sbdlq[amqp]'"
            ) from None
        raise


# ---------------------------------------------------------------------- helpers


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


#: the top-level group of this module, by the name the user types (its subcommands are the
#: `@app.command`s above; commands/emulator_entities.py adds more to the same group)
COMMANDS = {"emulator": app}


def register(parent: typer.Typer, name: str) -> None:
    """Add the group `name` of `COMMANDS` to `parent`."""
    parent.add_typer(COMMANDS[name], name=name)
