"""The operator's day (issue 14): global options anywhere, quiet cron runs, plain durations,
profiles shown without secrets, and an unreachable broker that says why. Exact CLI output."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from sbdlq.emulator.engine import Engine

STAGING = "profiles:\n  staging:\n    connection_string_env: STAGING_SB_CONN\n  local:\n    emulator: {store}\n"


@pytest.fixture
def orders(engine: Engine) -> Engine:
    engine.create_queue("orders")
    return engine


@pytest.fixture
def profiles(cli: Any, store: Path, tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(STAGING.format(store=store))
    cli.env["SBDLQ_CONFIG"] = str(config)
    return config


@pytest.fixture
def off_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr is cron mail, a pipe or a file, not a person."""
    monkeypatch.setattr("sbdlq.terminal.stderr_is_terminal", lambda: False)


# -------------------------------------------------------------- global options after the command


def test_profile_after_the_command_is_the_same_as_before(orders: Engine, cli: Any, profiles: Path) -> None:
    before = cli.bare("--profile", "local", "count", "orders", "-o", "json")
    after = cli.bare("count", "orders", "--profile", "local", "-o", "json")
    assert before == after
    assert after.exit_code == 0
    assert after.json() == [
        {"entity": "orders", "active": 0, "dead_letter": 0, "transfer_dead_letter": 0, "scheduled": 0}
    ]


def test_global_options_after_subcommands_of_groups(orders: Engine, cli: Any, profiles: Path, store: Path) -> None:
    r = cli.bare("transfer-dlq", "peek", "orders", "--profile", "local", "-o", "json")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "[]\n", "")
    r = cli.bare("emulator", "list", f"--emulator={store}", "-o", "json")
    assert r.exit_code == 0, r
    assert [e["entity"] for e in r.json()] == ["orders"]


def test_diagnostic_options_after_the_command(orders: Engine, cli: Any, store: Path) -> None:
    r = cli.bare("count", "orders", "--emulator", str(store), "-v", "--timeout", "10")
    assert r.exit_code == 0
    assert f"sbdlq: target: emulator store {store} (from --emulator)\n" in r.stderr


def test_two_targets_are_refused_wherever_they_are(cli: Any, store: Path) -> None:
    r = cli.bare("--emulator", str(store), "count", "--namespace", "contoso")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == "sbdlq: conflicting options: --namespace and --emulator (give only one target)\n"


def test_an_option_value_that_looks_like_a_global_option_stays_with_the_command(orders: Engine, cli: Any) -> None:
    r = cli("peek", "orders", "--subject", "--debug", "-o", "json")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "[]\n", "")


def test_after_double_dash_nothing_is_lifted(cli: Any) -> None:
    r = cli("count", "--", "--profile")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr.startswith("sbdlq: invalid entity name '--profile' (")


def test_global_options_complete_after_the_command(profiles: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.shell_completion import BashComplete

    from sbdlq.cli.main import app

    monkeypatch.setenv("SBDLQ_CONFIG", str(profiles))
    import typer

    complete = BashComplete(typer.main.get_command(app), {}, "sbdlq", "_SBDLQ_COMPLETE")
    assert [c.value for c in complete.get_completions(["count", "orders"], "--pro")] == ["--profile", "--proxy"]
    assert [c.value for c in complete.get_completions(["count", "orders", "--profile"], "")] == ["staging", "local"]
    assert "--debug" in [c.value for c in complete.get_completions(["transfer-dlq", "peek", "x"], "--d")]


# -------------------------------------------------------------- notes: terminal or -v only


def _default_store(tmp_path: Path) -> Path:
    """The data dir of a user whose default emulator store exists."""
    data = tmp_path / "data"
    Engine(data / "sbdlq" / "emulator.db").close()
    return data


def test_notes_stay_off_cron_mail(cli: Any, off_terminal: None, tmp_path: Path) -> None:
    _default_store(tmp_path)
    r = cli.bare("count", "-o", "json", env={"XDG_DATA_HOME": str(tmp_path / "data")})
    assert (r.exit_code, r.stdout, r.stderr) == (0, "[]\n", "")


def test_notes_shown_with_verbose_off_a_terminal(cli: Any, off_terminal: None, tmp_path: Path) -> None:
    data = _default_store(tmp_path)
    r = cli.bare("count", "-o", "json", "-v", env={"XDG_DATA_HOME": str(data)})
    assert r.exit_code == 0
    assert r.stderr.splitlines()[0] == (
        f"sbdlq: using the local emulator at {data / 'sbdlq' / 'emulator.db'} (no target configured)"
    )


def test_plan_and_showing_the_first_only_on_a_terminal(engine: Engine, cli: Any, off_terminal: None) -> None:
    engine.create_queue("q")
    _dead_letter(engine, "q", 3)
    r = cli("peek", "q", "--max", "1")
    assert r.exit_code == 0 and r.stderr == ""
    r = cli("resubmit", "q", "--dry-run")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "dry run: 3 message(s) would be resubmitted\n", "")
    r = cli("resubmit", "q", "--dry-run", "-v")
    assert "sbdlq: plan: resubmit 3 message(s) from q/$DeadLetterQueue to q (dry run)\n" in r.stderr


def test_errors_always_reach_stderr(engine: Engine, cli: Any, off_terminal: None) -> None:
    r = cli("peek", "nosuch")
    assert (r.exit_code, r.stdout) == (4, "")
    assert r.stderr == "sbdlq: The messaging entity 'nosuch' could not be found.\n"


# -------------------------------------------------------------- config show without the secret


def test_config_show_names_an_unset_secret_variable(cli: Any, profiles: Path) -> None:
    r = cli.bare("config", "show", "staging", "-o", "json", env={"STAGING_SB_CONN": ""})
    assert r.exit_code == 0, r
    assert r.json()[2] == {
        "setting": "connection_string_env",
        "value": "STAGING_SB_CONN (not set)",
        "source": "profile staging",
    }


# -------------------------------------------------------------- durations and unreachable brokers


def test_a_bare_number_is_seconds(orders: Engine, cli: Any, profiles: Path, store: Path) -> None:
    r = cli("--timeout", "10", "count", "orders", "-o", "json")
    assert r.exit_code == 0, r
    r = cli("purge", "orders", "--older-than", "3600", "--dry-run")
    assert (r.exit_code, r.stdout) == (0, "dry run: 0 message(s) would be deleted\n")
    profiles.write_text(f"profiles:\n  local:\n    emulator: {store}\n    timeout: 10\n")
    r = cli.bare("--profile", "local", "count", "orders", "-o", "json")
    assert r.exit_code == 0, r
    r = cli.bare("--profile", "local", "config", "show", "-o", "json")
    assert {"setting": "timeout", "value": "10", "source": "profile local"} in r.json()


def test_unresolvable_host_says_so(cli: Any) -> None:
    conn = "Endpoint=sb://nosuch.invalid/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0"
    r = cli.bare("--connection-string", conn, "count", "orders", "--timeout", "10")
    assert (r.exit_code, r.stdout) == (6, "")
    assert r.stderr == "sbdlq: cannot resolve nosuch.invalid (check the host name in the target)\n"


def test_refused_connection_says_so(cli: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0;UseDevelopmentEmulator=true"
    # Its HTTP port given (nothing listens there either): without it the target is refused at once.
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(port)}
    r = cli.bare("--connection-string", conn, "count", "orders", "--timeout", "10", env=env)
    assert (r.exit_code, r.stdout) == (6, "")
    assert r.stderr.splitlines()[-1] == (
        f"sbdlq: cannot reach 127.0.0.1:{port}: connection refused "
        f"(is the emulator running (sbdlq emulator serve) on 127.0.0.1:{port}?)"
    )


# -------------------------------------------------------------- helpers


def _dead_letter(engine: Engine, queue: str, n: int) -> None:
    from sbdlq.addresses import Address, EntityPath
    from sbdlq.models import OutboundMessage

    engine.send(queue, [OutboundMessage(body=b"{}", message_id=f"m{i}") for i in range(n)])
    got = engine.receive(Address(EntityPath(queue)), n)
    engine.dead_letter(Address(EntityPath(queue)), [m.lock_token for m in got if m.lock_token], "Timeout", "slow")


# -------------------------------------------------------------- count TOPIC


@pytest.fixture
def topic(engine: Engine) -> Engine:
    """Topic t with subscriptions a (2 dead-lettered) and b (none), and queue q."""
    from sbdlq.addresses import Address, EntityPath
    from sbdlq.models import OutboundMessage

    engine.create_topic("t")
    engine.create_subscription("t", "a")
    engine.create_subscription("t", "b")
    engine.create_queue("q")
    engine.send("t", [OutboundMessage(body=b"x", message_id=f"m{i}") for i in range(2)])
    sub = Address(EntityPath("t", "a"))
    got = engine.receive(sub, 2)
    engine.dead_letter(sub, [m.lock_token for m in got if m.lock_token], "Timeout", "slow")
    return engine


def test_count_topic_shows_its_subscriptions(topic: Engine, cli: Any) -> None:
    r = cli("count", "t", "-o", "json")
    assert r.exit_code == 0, r
    assert r.json() == [
        {"entity": "t/Subscriptions/a", "active": 0, "dead_letter": 2, "transfer_dead_letter": 0, "scheduled": 0},
        {"entity": "t/Subscriptions/b", "active": 2, "dead_letter": 0, "transfer_dead_letter": 0, "scheduled": 0},
    ]


def test_count_topic_fail_above_counts_its_subscriptions(topic: Engine, cli: Any) -> None:
    r = cli("count", "t", "q", "--fail-above", "1", "-o", "jsonl")
    assert r.exit_code == 3
    assert r.stdout.count("\n") == 3
    assert r.stderr == "sbdlq: t/Subscriptions/a: 2 messages in the dead-letter queue, above 1\n"
    assert cli("count", "t", "--fail-above", "2", "-o", "json").exit_code == 0


def test_count_of_a_missing_entity_is_still_not_found(topic: Engine, cli: Any) -> None:
    r = cli("count", "nosuch", "-o", "json")
    assert (r.exit_code, r.stdout) == (4, "")


# -------------------------------------------------------------- hints for likely mistakes


def test_where_on_sys_dead_letter_reason_says_it_is_an_application_property(orders: Engine, cli: Any) -> None:
    r = cli("peek", "orders", "--where", "sys.DeadLetterReason = 'X'")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (
        "sbdlq: invalid --where expression: syntax error at position 5: unknown system property "
        "'sys.DeadLetterReason' (DeadLetterReason is an application property: write DeadLetterReason)\n"
    )
    r = cli("peek", "orders", "--where", "sys.Lable = 'X'")
    assert r.stderr.endswith("unknown system property 'sys.Lable' (did you mean sys.Label?)\n")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["cuont"], "sbdlq: No such command 'cuont'. Did you mean 'count'? (see 'sbdlq --help')"),
        (["emulator", "lsit"], "sbdlq: No such command 'lsit'. Did you mean 'list'? (see 'sbdlq emulator --help')"),
        (
            ["count", "--fial-above", "3"],
            "sbdlq: No such option '--fial-above'. Did you mean '--fail-above'? (see 'sbdlq count --help')",
        ),
        (
            ["count", "x", "--prfile", "p"],
            "sbdlq: No such option '--prfile'. Did you mean '--profile'? (see 'sbdlq count --help')",
        ),
    ],
)
def test_a_misspelt_command_or_option_suggests_the_nearest(cli: Any, args: list[str], line: str) -> None:
    r = cli.bare(*args)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", line + "\n")


def test_jsonl_query_null_on_every_line_warns_once(engine: Engine, cli: Any) -> None:
    engine.create_queue("q")
    _dead_letter(engine, "q", 3)
    r = cli("peek", "q", "-o", "jsonl", "--query", "[].message_id")
    assert (r.exit_code, r.stdout) == (0, "null\nnull\nnull\n")
    assert r.stderr == (
        "sbdlq: warning: --query '[].message_id' gave null on every line; with -o jsonl it applies to each "
        "record (e.g. --query message_id, not [].message_id)\n"
    )
    r = cli("peek", "q", "-o", "jsonl", "--query", "message_id")
    assert (r.exit_code, r.stdout, r.stderr) == (0, '"m0"\n"m1"\n"m2"\n', "")


# -------------------------------------------------------------- emulator entities without a Config.json


def test_emulator_create_queue_with_its_properties(cli: Any, store: Path) -> None:
    r = cli(
        "emulator", "create", "queue", "orders", "--max-delivery-count", "3", "--lock-duration", "30",
        "--ttl", "1h", "--requires-session", "--dead-letter-on-expiration",
    )  # fmt: skip
    assert (r.exit_code, r.stdout, r.stderr) == (0, "created queue orders\n", "")
    with Engine(store) as engine:
        info = engine.get_entity("orders")
    assert (info.max_delivery_count, info.lock_duration_s, info.default_ttl_s) == (3, 30.0, 3600.0)
    assert info.requires_session and info.dead_lettering_on_expiration
    r = cli("emulator", "create", "queue", "orders")
    assert (r.exit_code, r.stderr) == (1, "sbdlq: The messaging entity 'orders' already exists.\n")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--lock-duration", "10m"], "sbdlq: --lock-duration 10m: Service Bus allows at most 5m"),
        (["--ttl", "soon"], "sbdlq: invalid --ttl 'soon' (use e.g. 250ms, 30s, 5m, 2h, 3d or ISO 8601 like PT1M)"),
    ],
)
def test_emulator_create_queue_bad_values(cli: Any, args: list[str], line: str) -> None:
    r = cli("emulator", "create", "queue", "q", *args)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", line + "\n")


def test_emulator_create_topic_and_filtered_subscription(cli: Any, store: Path) -> None:
    assert cli("emulator", "create", "topic", "t").stdout == "created topic t\n"
    r = cli("emulator", "create", "subscription", "t/Subscriptions/eu", "--sql-filter", "region = 'eu'")
    assert (r.exit_code, r.stdout) == (0, "created subscription t/Subscriptions/eu (filter: region = 'eu')\n")
    assert cli("emulator", "send", "t", "--body", "x", "--property", "region=us").exit_code == 0
    assert cli("emulator", "send", "t", "--body", "y", "--property", "region=eu").exit_code == 0
    assert cli("count", "t/Subscriptions/eu", "-o", "json").json()[0]["active"] == 1
    r = cli("emulator", "create", "subscription", "t/Subscriptions/bad", "--sql-filter", "region = ")
    assert (r.exit_code, r.stderr) == (
        2,
        "sbdlq: invalid --sql-filter 'region = ': syntax error at position 10: unexpected end of expression\n",
    )
    r = cli("emulator", "create", "subscription", "nosuch/Subscriptions/s")
    assert (r.exit_code, r.stderr) == (4, "sbdlq: The messaging entity 'nosuch' could not be found.\n")


def test_emulator_delete_asks_or_needs_yes(cli: Any) -> None:
    cli("emulator", "create", "topic", "t")
    cli("emulator", "create", "subscription", "t/Subscriptions/s")
    r = cli("emulator", "delete", "t")
    assert (r.exit_code, r.stderr) == (2, "sbdlq: delete removes t and its messages; pass --yes to confirm\n")
    r = cli("emulator", "delete", "t", "--yes")
    assert (r.exit_code, r.stdout) == (0, "deleted topic t and its messages\n")
    assert cli("emulator", "list", "-o", "json").json() == []


def test_serve_without_the_amqp_extra_says_how_to_install_it(cli: Any, engine: Engine, monkeypatch: Any) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "sbdlq.emulator.amqp.server", None)
    r = cli("emulator", "serve")
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == "sbdlq: `sbdlq emulator serve` needs python-qpid-proton (pip install 'sbdlq[amqp]')\n"


# -------------------------------------------------------------- README on a fresh machine


def test_readme_states_the_python_requirement_and_completion_lines_make_their_directory() -> None:
    from support.readme import PAGES

    readme = PAGES["README.md"]
    assert "Needs Python 3.11 or newer as `python3`" in readme
    assert [page for page, text in PAGES.items() if "python3.11 " in text] == []
    for target in ("~/.zfunc/_sbdlq", "~/.config/fish/completions/sbdlq.fish"):
        (line,) = [x for x in readme.splitlines() if "cp completions/" in x and target in x]
        directory = target.rsplit("/", 1)[0]
        assert line.startswith(f"mkdir -p {directory} && cp "), line
    first_serve = readme.index("emulator serve")
    assert "pip install 'sbdlq[amqp]'" in readme[first_serve : first_serve + 400]


def test_an_unsupported_sdk_release_is_named_instead_of_a_refusal(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """azure-servicebus 7.13 installed by hand: the failure names it and the supported range."""
    from sbdlq.backends.servicebus import shortcuts

    monkeypatch.setattr(shortcuts, "sdk_version", lambda: "7.13.0")  # the SDK boundary: its metadata
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0;UseDevelopmentEmulator=true"
    env = {"SBDLQ_EMULATOR_HTTP_PORT": str(port)}
    r = cli.bare("--connection-string", conn, "count", "orders", "--timeout", "10", env=env)
    assert (r.exit_code, r.stdout) == (6, "")
    assert r.stderr.splitlines()[-1] == (
        f"sbdlq: cannot reach 127.0.0.1:{port} with azure-servicebus 7.13.0: sbdlq supports releases "
        "7.15.0 to below 7.16 (pip install 'azure-servicebus>=7.15.0,<7.16')"
    )
