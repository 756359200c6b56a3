"""The options of `sbdlq emulator serve` (its signature reads them): keys, limits, quotas, TLS, Config.json."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TLS = "TLS"

TlsOption = Annotated[
    bool,
    typer.Option("--tls", help="Also serve AMQPS on --tls-port, and HTTPS (wss) on --http-port.", rich_help_panel=TLS),
]
TlsPortOption = Annotated[
    int, typer.Option("--tls-port", help="AMQPS port (0: any free port).", min=0, max=65535, rich_help_panel=TLS)
]
CertOption = Annotated[
    str | None,
    typer.Option(
        "--cert",
        help="Your own PEM certificate (chain) instead of the local CA's (implies --tls).",
        metavar="FILE",
        show_default=False,
        rich_help_panel=TLS,
    ),
]
CertKeyOption = Annotated[
    str | None,
    typer.Option(
        "--cert-key", help="The private key (PEM) of --cert.", metavar="FILE", show_default=False, rich_help_panel=TLS
    ),
]

KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        envvar="SBDLQ_EMULATOR_KEY",
        help="SAS key clients must sign with (required off loopback). Visible in `ps`: "
        "prefer --key-file or SBDLQ_EMULATOR_KEY.",
        show_default=False,
    ),
]
KeyFileOption = Annotated[
    str | None, typer.Option("--key-file", help="Read the SAS key from this file (one line).", show_default=False)
]
MaxConnectionsOption = Annotated[
    int | None,
    typer.Option(
        "--max-connections", help="Most AMQP connections at once [default: 1000; --quotas microsoft: 10].", min=1
    ),
]
QuotasOption = Annotated[
    str,
    typer.Option(
        "--quotas",
        help="The namespace's quotas: generous (no caps past Service Bus's rules) or microsoft (the Microsoft "
        "emulator's: 50 queues and topics, 50 subscriptions a topic, 10 connections, 256 KB messages, "
        "100 MB an entity, TTL at most 1 h).",
    ),
]
AuthTimeoutOption = Annotated[
    float, typer.Option("--auth-timeout", help="Seconds a client has to authenticate (SASL + token).", min=0.1)
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A Config.json in Microsoft's emulator format to apply before listening (the store is created "
        "if missing), as that emulator loads its own.",
        metavar="FILE",
    ),
]
