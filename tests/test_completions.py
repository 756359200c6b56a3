"""Shell completion: the checked-in scripts, the protocol they speak with sbdlq, and entity names.

The scripts in completions/ must equal a fresh `completions/generate.py` run; each one calls
`sbdlq` back with an `_SBDLQ_COMPLETE` instruction that sbdlq must answer (checked through
a real process, and for bash through bash itself). Entity names come from the emulator
store only: never the network, never a new store, [] on any trouble, within a deadline.
"""

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import click
import click.shell_completion
import pytest
import typer
from typer.testing import CliRunner

from sbdlq.cli import completion
from sbdlq.cli.completion import complete_destination, complete_entity, complete_profile
from sbdlq.cli.main import app
from sbdlq.emulator import admin
from sbdlq.emulator.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
COMPLETIONS = ROOT / "completions"
SCRIPTS = {"bash": "sbdlq.bash", "zsh": "_sbdlq", "fish": "sbdlq.fish"}
TARGET_VARS = ("SBDLQ_CONNECTION_STRING", "SBDLQ_NAMESPACE", "SBDLQ_EMULATOR", "SBDLQ_PROFILE", "SBDLQ_TIMEOUT")
ENTITIES = ["Billing/EU", "events/Subscriptions/audit", "events/Subscriptions/sessions", "orders"]
DESTINATIONS = ["Billing/EU", "events", "orders"]
CONFIG = "default_profile: local\nprofiles:\n  local:\n    emulator: {store}\n  prod:\n    namespace: contoso\n"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sbdlq_completions_generate", COMPLETIONS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sbdlq_executable() -> str:
    beside = Path(sys.executable).with_name("sbdlq")
    found = str(beside) if beside.exists() else shutil.which("sbdlq")
    if found is None:
        pytest.fail("no `sbdlq` console script: install the project (pip install -e '.[test]')")
    return found


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in TARGET_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SBDLQ_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    """An emulator store with two queues, a topic and two subscriptions."""
    path = tmp_path / "store.db"
    with Engine(path) as eng:
        eng.create_queue("orders")
        eng.create_queue("Billing/EU")
        eng.create_topic("events")
        eng.create_subscription("events", "audit")
        eng.create_subscription("events", "sessions", requires_session=True)
    yield path


@pytest.fixture
def click_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The completion classes sbdlq's own process uses (another test may have registered Typer's)."""
    shells = click.shell_completion._available_shells
    monkeypatch.setitem(shells, "bash", click.shell_completion.BashComplete)
    monkeypatch.setitem(shells, "zsh", click.shell_completion.ZshComplete)
    monkeypatch.setitem(shells, "fish", click.shell_completion.FishComplete)


def ctx_for(*args: str) -> click.Context:
    """The context click builds while completing `sbdlq ARGS... <TAB>`."""
    from click.shell_completion import _resolve_context

    return _resolve_context(typer.main.get_command(app), {}, "sbdlq", list(args))


# ------------------------------------------------------------------ the generated scripts


def test_checked_in_scripts_match_a_fresh_generation() -> None:
    generated = load_generator().scripts()
    assert sorted(generated) == sorted(SCRIPTS.values())
    for name, text in generated.items():
        on_disk = (COMPLETIONS / name).read_text(encoding="utf-8")
        assert on_disk == text, f"completions/{name} is stale: run python completions/generate.py"


def test_generate_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gen = load_generator()
    assert gen.main(["--dir", str(tmp_path), "--check"]) == 1
    assert capsys.readouterr().err == "stale: sbdlq.bash, _sbdlq, sbdlq.fish; run python completions/generate.py\n"
    assert list(tmp_path.iterdir()) == []
    assert gen.main(["--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "".join(f"wrote {tmp_path / n}\n" for n in ("sbdlq.bash", "_sbdlq", "sbdlq.fish"))
    assert gen.main(["--dir", str(tmp_path), "--check"]) == 0
    for name in SCRIPTS.values():
        assert (tmp_path / name).read_bytes() == (COMPLETIONS / name).read_bytes()


def test_zsh_script_starts_with_compdef() -> None:
    assert (COMPLETIONS / "_sbdlq").read_text().splitlines()[0] == "#compdef sbdlq"


def instruction(shell: str) -> str:
    text = (COMPLETIONS / SCRIPTS[shell]).read_text()
    found = re.findall(r"_SBDLQ_COMPLETE=(\w+)", text)
    assert len(found) == 1, f"{SCRIPTS[shell]}: expected one callback, found {found}"
    return found[0]


def callback(
    shell: str, words: str, cword: str, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run sbdlq as the shell's script does on TAB."""
    env = {k: v for k, v in os.environ.items() if k not in TARGET_VARS}
    env.update({"_SBDLQ_COMPLETE": instruction(shell), "COMP_WORDS": words, "COMP_CWORD": cword, **(extra or {})})
    return subprocess.run([sbdlq_executable()], env=env, capture_output=True, text=True, timeout=60)


def test_bash_callback_is_answered() -> None:
    result = callback("bash", "sbdlq transfer-dlq pe", "2")
    assert (result.returncode, result.stdout, result.stderr) == (0, "plain,peek\n", "")


def test_zsh_callback_is_answered() -> None:
    peek = typer.main.get_command(app).commands["transfer-dlq"].commands["peek"]  # type: ignore[attr-defined]
    result = callback("zsh", "sbdlq transfer-dlq pe", "2")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"plain\npeek\n{peek.get_short_help_str()}\n", "")


def test_fish_callback_is_answered() -> None:
    peek = typer.main.get_command(app).commands["transfer-dlq"].commands["peek"]  # type: ignore[attr-defined]
    result = callback("fish", "sbdlq transfer-dlq pe", "pe")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"plain,peek\t{peek.get_short_help_str()}\n", "")


def bash_complete(words: list[str], env: dict[str, str] | None = None) -> list[str]:
    """COMPREPLY after sourcing completions/sbdlq.bash and pressing TAB on the last word."""
    script = (
        f"source {COMPLETIONS / 'sbdlq.bash'}\n"
        'COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()\n'
        f"_sbdlq_completion {sbdlq_executable()}\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    full_env = {k: v for k, v in os.environ.items() if k not in TARGET_VARS}
    full_env.update(env or {})
    result = subprocess.run(
        ["bash", "-c", script, "bash", *words], env=full_env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return [line for line in result.stdout.splitlines() if line]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_script_completes_commands_options_and_profiles(tmp_path: Path, store: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(store=store))
    env = {"SBDLQ_CONFIG": str(config)}
    assert bash_complete(["sbdlq", "tr"], env) == ["transfer-dlq"]
    assert bash_complete(["sbdlq", "config", ""], env) == ["path", "list", "show"]
    assert bash_complete(["sbdlq", "--pro"], env) == ["--profile", "--proxy"]
    assert bash_complete(["sbdlq", "config", "show", ""], env) == ["local", "prod"]
    assert bash_complete(["sbdlq", "config", "show", "p"], env) == ["prod"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_script_completes_entity_names(store: Path) -> None:
    assert bash_complete(["sbdlq", "--emulator", str(store), "peek", "ev"]) == ENTITIES[1:3]
    assert bash_complete(["sbdlq", "--emulator", str(store), "transfer-dlq", "count", "o"]) == ["orders"]


# ------------------------------------------------------------------ complete_entity and friends


def test_complete_entity_lists_queues_and_subscriptions(store: Path) -> None:
    ctx = ctx_for("--emulator", str(store), "peek")
    assert complete_entity(ctx, "") == ENTITIES
    assert complete_entity(ctx, "EV") == ENTITIES[1:3]
    assert complete_entity(ctx, "events/subscriptions/a") == ["events/Subscriptions/audit"]
    assert complete_entity(ctx, "billing") == ["Billing/EU"]
    assert complete_entity(ctx, "nothing") == []


def test_complete_destination_lists_queues_and_topics(store: Path) -> None:
    assert complete_destination(ctx_for("--emulator", str(store), "resubmit", "orders", "--to"), "") == DESTINATIONS


def test_complete_entity_follows_the_environment_and_profiles(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SBDLQ_EMULATOR", str(store))
    assert complete_entity(ctx_for("peek"), "o") == ["orders"]
    monkeypatch.delenv("SBDLQ_EMULATOR")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(store=store))
    monkeypatch.setenv("SBDLQ_CONFIG", str(config))
    assert complete_entity(ctx_for("peek"), "o") == ["orders"]
    assert complete_entity(ctx_for("--profile", "local", "peek"), "o") == ["orders"]
    assert complete_entity(ctx_for("--profile", "prod", "peek"), "o") == []


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("completion touched the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.parametrize(
    "args",
    [
        ["--namespace", "contoso"],
        [
            "--connection-string",
            "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=R;SharedAccessKey=k",
        ],
        [
            "--connection-string",
            "Endpoint=sb://localhost;SharedAccessKeyName=R;SharedAccessKey=k;UseDevelopmentEmulator=true",
        ],
    ],
    ids=["namespace", "connection-string", "emulator-connection-string"],
)
def test_real_namespaces_complete_nothing_and_stay_offline(
    no_network: None, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    listed: list[str] = []

    def entity_names(path: str, kinds: tuple[str, ...]) -> list[str]:
        listed.append(path)
        return ["orders"]

    monkeypatch.setattr(admin, "entity_names", entity_names)
    assert complete_entity(ctx_for(*args, "peek"), "") == []
    assert listed == []  # nothing is listed (so nothing waits for the deadline): the answer is at once


def test_missing_store_completes_nothing_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "store.db"
    assert complete_entity(ctx_for("--emulator", str(missing), "peek"), "") == []
    assert not missing.parent.exists()
    # Nor the default store, when nothing is configured.
    assert complete_entity(ctx_for("peek"), "") == []
    assert not (tmp_path / "data").exists()


def test_trouble_completes_nothing_and_prints_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], store: Path
) -> None:
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("not a database\n" * 100)
    assert complete_entity(ctx_for("--emulator", str(not_a_db), "peek"), "") == []
    assert complete_entity(ctx_for("--emulator", str(tmp_path), "peek"), "") == []
    assert complete_entity(ctx_for("--emulator", str(store), "--namespace", "x", "peek"), "") == []
    broken = tmp_path / "broken.yaml"
    broken.write_text("profiles: [unclosed\n")
    monkeypatch.setenv("SBDLQ_CONFIG", str(broken))
    assert complete_entity(ctx_for("--emulator", str(store), "peek"), "") == []
    assert complete_profile(ctx_for("config", "show"), "") == []
    assert capfd.readouterr() == ("", "")


def test_a_busy_store_gives_up_at_the_deadline(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    released, finished = threading.Event(), threading.Event()

    def stuck(path: str, kinds: tuple[str, ...]) -> list[str]:
        released.wait(600)  # a store another process holds locked (until the test lets go)
        finished.set()
        return ["orders"]

    monkeypatch.setattr(completion, "COMPLETION_DEADLINE_S", 0.2)
    monkeypatch.setattr(admin, "entity_names", stuck)
    try:
        assert complete_entity(ctx_for("--emulator", str(store), "peek"), "") == []
        # It answered while the store was still held: it gave up instead of waiting.
        assert not finished.is_set()
    finally:
        released.set()


def test_complete_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
    assert complete_profile(ctx_for("config", "show"), "") == []
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(store=store))
    monkeypatch.setenv("SBDLQ_CONFIG", str(config))
    assert complete_profile(ctx_for("config", "show"), "") == ["local", "prod"]
    assert complete_profile(ctx_for("config", "show"), "PR") == ["prod"]


# ------------------------------------------------------------------ through the app, as the shell asks


def invoke_complete(target: Any, words: str, env: dict[str, str] | None = None) -> Any:
    cword = str(len(words.split(" ")) - 1)
    return CliRunner().invoke(
        target,
        [],
        prog_name="sbdlq",
        env={"_SBDLQ_COMPLETE": instruction("bash"), "COMP_WORDS": words, "COMP_CWORD": cword, **(env or {})},
    )


def test_config_show_completes_profiles_through_the_app(click_classes: None, tmp_path: Path, store: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(store=store))
    result = invoke_complete(app, "sbdlq config show ", {"SBDLQ_CONFIG": str(config)})
    assert (result.exit_code, result.stdout) == (0, "plain,local\nplain,prod\n")


def test_typer_passes_ctx_and_incomplete_to_complete_entity(click_classes: None, store: Path) -> None:
    """An ENTITY argument wired with `autocompletion=complete_entity`, the way cli/commands/dlq.py wires it."""
    mini = typer.Typer(add_completion=False)  # True would register Typer's own completion classes

    @mini.callback()
    def root(emulator: Annotated[str | None, typer.Option("--emulator", envvar="SBDLQ_EMULATOR")] = None) -> None:
        """Root."""

    @mini.command()
    def peek(entity: Annotated[str, typer.Argument(autocompletion=complete_entity)]) -> None:
        """Peek."""

    result = invoke_complete(mini, f"sbdlq --emulator {store} peek ev")
    assert (result.exit_code, result.stdout) == (
        0,
        "plain,events/Subscriptions/audit\nplain,events/Subscriptions/sessions\n",
    )


DLQ_COMMANDS = [[name] for name in ("count", "peek", "inspect-reason", "resubmit", "purge")] + [
    ["transfer-dlq", name] for name in ("count", "peek", "inspect-reason", "resubmit", "purge")
]


@pytest.mark.parametrize("command", DLQ_COMMANDS, ids=[" ".join(c) for c in DLQ_COMMANDS])
def test_dlq_commands_complete_entity_names(click_classes: None, store: Path, command: list[str]) -> None:
    result = invoke_complete(app, f"sbdlq --emulator {store} {' '.join(command)} o")
    assert (result.exit_code, result.stdout) == (0, "plain,orders\n")


def test_profile_option_completes_profile_names(click_classes: None, tmp_path: Path, store: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(store=store))
    result = invoke_complete(app, "sbdlq --profile ", {"SBDLQ_CONFIG": str(config)})
    assert (result.exit_code, result.stdout) == (0, "plain,local\nplain,prod\n")
