"""Profiles, target precedence and `sbdlq config path|list|show` (DESIGN §2).

Precedence: command-line option > environment variable > profile > the local emulator, for
every kind of target; two targets at one level are refused (exit 2, one line). A profile's
target counts at the level the profile was chosen at (`--profile` option, `SBDLQ_PROFILE`
env, `default_profile` file). Bad config files stop every command with one line naming the
file and the field.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sbdlq.backends.servicebus.shortcuts import Shortcuts, sdk_version
from sbdlq.emulator.engine import Engine
from sbdlq.errors import BadInput
from sbdlq.profiles import Setting, Source, resolve_target

KEY = "c2VjcmV0LWtleS1mb3ItdGVzdHM9PQ=="
CONN = f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={KEY}"
CONN_MASKED = "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=***"
KEY2 = "b3RoZXIta2V5LWZvci10ZXN0cw=="
CONN2 = f"Endpoint=sb://fabrikam.servicebus.windows.net/;SharedAccessKeyName=Send;SharedAccessKey={KEY2}"
CONN2_MASKED = "Endpoint=sb://fabrikam.servicebus.windows.net/;SharedAccessKeyName=Send;SharedAccessKey=***"

Run = Callable[..., Any]
CliResult = Any


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Where the test's config file goes (not created)."""
    return tmp_path / "conf" / "config.yaml"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """The user data dir, so the default emulator store has a known path."""
    return tmp_path / "data"


@pytest.fixture
def run(cli: Any, config: Path, data_dir: Path, tmp_path: Path) -> Run:
    """`sbdlq ARGS...` with the test's config file, data dir and config dir; nothing else set."""
    base = {
        "SBDLQ_CONFIG": str(config),
        "XDG_DATA_HOME": str(data_dir),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "STAGING_SB_CONN": None,
    }

    def invoke(*args: str, env: dict[str, Any] | None = None) -> CliResult:
        return cli.bare(*args, env={**base, **(env or {})})

    return invoke


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def rows(result: CliResult) -> dict[str, tuple[Any, str]]:
    """`config show -o json` as setting → (value, source)."""
    assert result.exit_code == 0, result.stderr
    return {r["setting"]: (r["value"], r["source"]) for r in json.loads(result.stdout)}


def default_store(data_dir: Path) -> str:
    return str(data_dir / "sbdlq" / "emulator.db")


# ------------------------------------------------------------------ config path


def test_config_path_is_sbdlq_config(run: Run, config: Path) -> None:
    assert run("config", "path") == (0, f"{config}\n", "")


def test_config_path_defaults_to_the_user_config_dir(run: Run, tmp_path: Path) -> None:
    assert run("config", "path", env={"SBDLQ_CONFIG": None}) == (
        0,
        f"{tmp_path / 'xdg-config' / 'sbdlq' / 'config.yaml'}\n",
        "",
    )


# ------------------------------------------------------------------ config list

LISTED = f"""\
default_profile: local
profiles:
  local:
    emulator: stores/local.db
  prod:
    namespace: contoso
    output: json
    timeout: 1m
  staging:
    connection_string_env: STAGING_SB_CONN
  keyed:
    connection_string: "{CONN}"
    concurrency: 8
  bare:
    output: yaml
"""


def test_config_list_marks_the_default_and_never_shows_a_secret(run: Run, config: Path) -> None:
    write(config, LISTED)
    store = config.parent / "stores" / "local.db"
    w = max(len(str(store)), len("sb://contoso.servicebus.windows.net/"))
    assert run("config", "list") == (
        0,
        f"default  name     target                 {'value'.ljust(w)}  options\n"
        f"*        local    emulator               {str(store).ljust(w)}  -\n"
        f"         prod     namespace              {'contoso'.ljust(w)}  output=json timeout=1m\n"
        f"         staging  connection_string_env  {'STAGING_SB_CONN'.ljust(w)}  -\n"
        f"         keyed    connection_string      {'sb://contoso.servicebus.windows.net/'.ljust(w)}  concurrency=8\n"
        f"         bare     -                      {'-'.ljust(w)}  output=yaml\n",
        "",
    )


def test_config_list_json(run: Run, config: Path) -> None:
    write(config, LISTED)
    result = run("config", "list", "-o", "json")
    assert result.exit_code == 0
    assert KEY not in result.stdout
    assert json.loads(result.stdout) == [
        {
            "name": "local",
            "default": True,
            "target": "emulator",
            "value": str(config.parent / "stores" / "local.db"),
            "options": {},
        },
        {
            "name": "prod",
            "default": False,
            "target": "namespace",
            "value": "contoso",
            "options": {"output": "json", "timeout": "1m"},
        },
        {
            "name": "staging",
            "default": False,
            "target": "connection_string_env",
            "value": "STAGING_SB_CONN",
            "options": {},
        },
        {
            "name": "keyed",
            "default": False,
            "target": "connection_string",
            "value": "sb://contoso.servicebus.windows.net/",
            "options": {"concurrency": 8},
        },
        {"name": "bare", "default": False, "target": None, "value": None, "options": {"output": "yaml"}},
    ]


def test_config_list_without_a_file(run: Run, config: Path) -> None:
    assert run("config", "list") == (0, "", f"sbdlq: no config file at {config}\n")
    assert run("config", "list", "-o", "json") == (0, "[]\n", f"sbdlq: no config file at {config}\n")


def test_config_list_with_no_profiles(run: Run, config: Path) -> None:
    write(config, "# nothing yet\n")
    assert run("config", "list") == (0, "", f"sbdlq: no profiles in {config}\n")


def test_config_list_rejects_a_bad_output(run: Run, config: Path) -> None:
    write(config, LISTED)
    assert run("config", "list", "-o", "xml") == (
        2,
        "",
        "sbdlq: invalid output format 'xml' (use table, json, jsonl, yaml, tsv or none)\n",
    )


# ------------------------------------------------------------------ config show

#: the last row of every `config show`: the SDK release and whether sbdlq takes its private shortcuts
SDK_ROW = (f"azure-servicebus {sdk_version()}, shortcuts {Shortcuts.resolve('auto').why}", "default")


def test_config_show_says_when_the_sdk_shortcuts_are_off(run: Run, config: Path) -> None:
    write(config, "profiles:\n  p:\n    emulator: x.db\n    sdk_shortcuts: off\n")
    assert rows(run("config", "show", "-o", "json", env={"SBDLQ_SDK_SHORTCUTS": "off"}))["sdk"] == (
        f"azure-servicebus {sdk_version()}, shortcuts off (SBDLQ_SDK_SHORTCUTS)",
        "env SBDLQ_SDK_SHORTCUTS",
    )
    assert rows(run("config", "show", "p", "-o", "json"))["sdk"] == (
        f"azure-servicebus {sdk_version()}, shortcuts off (mode 'off')",
        "profile p",
    )
    bad = run("config", "show", "-o", "json", env={"SBDLQ_SDK_SHORTCUTS": "maybe"})
    assert bad.exit_code == 2 and "SBDLQ_SDK_SHORTCUTS must be one of auto, on, off" in bad.stderr


def test_config_show_with_nothing_configured(run: Run, config: Path, data_dir: Path) -> None:
    store = default_store(data_dir)
    w = max(len(str(config)), len(store), len(SDK_ROW[0]))
    assert run("config", "show") == (
        0,
        f"setting      {'value'.ljust(w)}  source\n"
        f"config_file  {str(config).ljust(w)}  env SBDLQ_CONFIG\n"
        f"profile      {'-'.ljust(w)}  default\n"
        f"emulator     {store.ljust(w)}  default\n"
        f"timeout      {'30s'.ljust(w)}  default\n"
        f"output       {'table'.ljust(w)}  default\n"
        f"sdk          {SDK_ROW[0].ljust(w)}  default\n",
        "",
    )


def test_config_show_a_profile_with_the_key_masked(run: Run, config: Path) -> None:
    write(config, LISTED)
    result = run("--profile", "keyed", "config", "show")
    w = max(len(CONN_MASKED), len(str(config)), len(SDK_ROW[0]))
    assert result == (
        0,
        f"setting            {'value'.ljust(w)}  source\n"
        f"config_file        {str(config).ljust(w)}  env SBDLQ_CONFIG\n"
        f"profile            {'keyed'.ljust(w)}  option --profile\n"
        f"connection_string  {CONN_MASKED.ljust(w)}  profile keyed\n"
        f"timeout            {'30s'.ljust(w)}  default\n"
        f"output             {'table'.ljust(w)}  default\n"
        f"concurrency        {'8'.ljust(w)}  profile keyed\n"
        f"sdk                {SDK_ROW[0].ljust(w)}  default\n",
        "",
    )
    assert KEY not in result.stdout + result.stderr


def test_config_show_sources_of_every_value(run: Run, config: Path) -> None:
    write(config, LISTED)
    assert rows(run("--timeout", "5s", "config", "show", "-o", "json", env={"SBDLQ_PROFILE": "prod"})) == {
        "config_file": (str(config), "env SBDLQ_CONFIG"),
        "profile": ("prod", "env SBDLQ_PROFILE"),
        "namespace": ("contoso.servicebus.windows.net", "profile prod"),
        "timeout": ("5s", "option --timeout"),
        "output": ("json", "profile prod"),
        "sdk": SDK_ROW,
    }
    assert rows(run("config", "show", "-o", "json", env={"SBDLQ_TIMEOUT": "2m"})) == {
        "config_file": (str(config), "env SBDLQ_CONFIG"),
        "profile": ("local", "config default_profile"),
        "emulator": (str(config.parent / "stores" / "local.db"), "profile local"),
        "timeout": ("2m", "env SBDLQ_TIMEOUT"),
        "output": ("table", "default"),
        "sdk": SDK_ROW,
    }


def test_config_show_name_is_the_profile_alone(run: Run, config: Path) -> None:
    """Options and variables don't apply to `config show NAME`: it shows what the file says."""
    write(config, LISTED)
    result = run("--namespace", "other", "config", "show", "prod", "-o", "json", env={"SBDLQ_TIMEOUT": "2m"})
    assert rows(result) == {
        "config_file": (str(config), "env SBDLQ_CONFIG"),
        "profile": ("prod", "argument"),
        "namespace": ("contoso.servicebus.windows.net", "profile prod"),
        "timeout": ("1m", "profile prod"),
        "output": ("json", "profile prod"),
        "sdk": SDK_ROW,
    }


def test_config_show_connection_string_env(run: Run, config: Path) -> None:
    write(config, LISTED)
    result = run("config", "show", "staging", "-o", "yaml", env={"STAGING_SB_CONN": CONN2})
    assert rows_from_yaml(result) == {
        "config_file": (str(config), "env SBDLQ_CONFIG"),
        "profile": ("staging", "argument"),
        "connection_string": (CONN2_MASKED, "profile staging ($STAGING_SB_CONN)"),
        "timeout": ("30s", "default"),
        "output": ("table", "default"),
        "sdk": SDK_ROW,
    }
    assert KEY2 not in result.stdout + result.stderr


def rows_from_yaml(result: CliResult) -> dict[str, tuple[Any, str]]:
    import yaml

    assert result.exit_code == 0, result.stderr
    return {r["setting"]: (r["value"], r["source"]) for r in yaml.safe_load(result.stdout)}


def test_config_show_unknown_profile(run: Run, config: Path) -> None:
    write(config, LISTED)
    assert run("config", "show", "nope") == (
        2,
        "",
        f"sbdlq: profile 'nope': no such profile in config file {config} "
        "(profiles: local, prod, staging, keyed, bare)\n",
    )


# ------------------------------------------------------------------ secrets in the file


def test_world_readable_file_with_a_connection_string_warns(run: Run, config: Path) -> None:
    write(config, f'default_profile: keyed\nprofiles:\n  keyed:\n    connection_string: "{CONN}"\n', mode=0o644)
    result = run("config", "show", "-o", "json")
    assert result.exit_code == 0
    assert result.stderr == (
        f"sbdlq: warning: {config} holds a secret and is readable by group or others (chmod 600 it)\n"
    )
    assert KEY not in result.stdout + result.stderr
    config.chmod(0o640)
    assert run("config", "show", "-o", "json").stderr.startswith(f"sbdlq: warning: {config} holds a secret")
    config.chmod(0o600)
    assert run("config", "show", "-o", "json").stderr == ""


def test_world_readable_file_without_secrets_does_not_warn(run: Run, config: Path) -> None:
    write(config, LISTED.replace(f'connection_string: "{CONN}"', "namespace: keyed"), mode=0o644)
    assert run("--profile", "staging", "config", "show", "-o", "json", env={"STAGING_SB_CONN": CONN}).stderr == ""


# ------------------------------------------------------------------ precedence

# kind → (option args, env, profile YAML, the value it resolves to, masked when shown)
KINDS: dict[str, dict[str, Any]] = {
    "emulator": {"opt": "/opt/o.db", "env": "/env/e.db", "prof": "/prof/p.db"},
    "namespace": {"opt": "optns", "env": "envns", "prof": "profns"},
    "connection_string": {"opt": CONN, "env": CONN2, "prof": CONN.replace("contoso", "northwind")},
}
ENV = {"emulator": "SBDLQ_EMULATOR", "namespace": "SBDLQ_NAMESPACE", "connection_string": "SBDLQ_CONNECTION_STRING"}


def shown(kind: str, value: str) -> str:
    """The value as `config show` prints it."""
    if kind == "namespace":
        return f"{value}.servicebus.windows.net"
    if kind == "connection_string":
        return value.split("SharedAccessKey=")[0] + "SharedAccessKey=***"
    return value


def profile_file(config: Path, kind: str) -> None:
    write(config, f'default_profile: p\nprofiles:\n  p:\n    {kind}: "{KINDS[kind]["prof"]}"\n')


@pytest.mark.parametrize("env_kind", list(KINDS))
@pytest.mark.parametrize("opt_kind", list(KINDS))
def test_option_beats_env_and_profile(run: Run, config: Path, opt_kind: str, env_kind: str) -> None:
    profile_file(config, env_kind)
    result = rows(
        run(
            f"--{opt_kind.replace('_', '-')}",
            KINDS[opt_kind]["opt"],
            "config",
            "show",
            "-o",
            "json",
            env={ENV[env_kind]: KINDS[env_kind]["env"]},
        )
    )
    assert result[opt_kind] == (shown(opt_kind, KINDS[opt_kind]["opt"]), f"option --{opt_kind.replace('_', '-')}")
    assert result["profile"] == ("p", "config default_profile")


@pytest.mark.parametrize("prof_kind", list(KINDS))
@pytest.mark.parametrize("env_kind", list(KINDS))
def test_env_beats_profile(run: Run, config: Path, env_kind: str, prof_kind: str) -> None:
    profile_file(config, prof_kind)
    result = rows(run("config", "show", "-o", "json", env={ENV[env_kind]: KINDS[env_kind]["env"]}))
    assert result[env_kind] == (shown(env_kind, KINDS[env_kind]["env"]), f"env {ENV[env_kind]}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_profile_beats_the_default(run: Run, config: Path, kind: str) -> None:
    profile_file(config, kind)
    result = rows(run("config", "show", "-o", "json"))
    assert result[kind] == (shown(kind, KINDS[kind]["prof"]), "profile p")


def test_profile_without_a_target_falls_back_to_the_emulator(run: Run, config: Path, data_dir: Path) -> None:
    write(config, "default_profile: p\nprofiles:\n  p:\n    output: json\n")
    result = rows(run("config", "show", "-o", "json"))
    assert result["emulator"] == (default_store(data_dir), "default")
    assert result["output"] == ("json", "profile p")


def test_nothing_configured_is_the_default_emulator(run: Run, data_dir: Path) -> None:
    assert rows(run("config", "show", "-o", "json"))["emulator"] == (default_store(data_dir), "default")


def test_profile_option_beats_profile_variable(run: Run, config: Path) -> None:
    write(config, LISTED)
    result = rows(run("--profile", "prod", "config", "show", "-o", "json", env={"SBDLQ_PROFILE": "local"}))
    assert result["profile"] == ("prod", "option --profile")
    assert result["namespace"] == ("contoso.servicebus.windows.net", "profile prod")


def test_profile_option_beats_target_variables(run: Run, config: Path) -> None:
    """`--profile prod` is a command-line choice: an exported SBDLQ_NAMESPACE doesn't override it."""
    write(config, LISTED)
    result = rows(run("--profile", "prod", "config", "show", "-o", "json", env={"SBDLQ_NAMESPACE": "envns"}))
    assert result["namespace"] == ("contoso.servicebus.windows.net", "profile prod")


def test_profile_variable_loses_to_a_target_option(run: Run, config: Path) -> None:
    write(config, LISTED)
    result = rows(run("--emulator", "/o.db", "config", "show", "-o", "json", env={"SBDLQ_PROFILE": "prod"}))
    assert result["emulator"] == ("/o.db", "option --emulator")
    assert result["output"] == ("json", "profile prod")  # its option defaults still apply


# ------------------------------------------------------------------ conflicts at one level

CONFLICTS = [
    (
        ["--connection-string", CONN, "--namespace", "contoso"],
        {},
        "sbdlq: conflicting options: --connection-string and --namespace (give only one target)\n",
    ),
    (
        ["--namespace", "contoso", "--emulator", "/x.db"],
        {},
        "sbdlq: conflicting options: --namespace and --emulator (give only one target)\n",
    ),
    (
        ["--connection-string", CONN, "--emulator", "/x.db"],
        {},
        "sbdlq: conflicting options: --connection-string and --emulator (give only one target)\n",
    ),
    (
        [],
        {"SBDLQ_CONNECTION_STRING": CONN, "SBDLQ_NAMESPACE": "contoso"},
        "sbdlq: conflicting environment variables: SBDLQ_CONNECTION_STRING and SBDLQ_NAMESPACE (set only one target)\n",
    ),
    (
        [],
        {"SBDLQ_NAMESPACE": "contoso", "SBDLQ_EMULATOR": "/x.db"},
        "sbdlq: conflicting environment variables: SBDLQ_NAMESPACE and SBDLQ_EMULATOR (set only one target)\n",
    ),
    (
        [],
        {"SBDLQ_CONNECTION_STRING": CONN, "SBDLQ_EMULATOR": "/x.db"},
        "sbdlq: conflicting environment variables: SBDLQ_CONNECTION_STRING and SBDLQ_EMULATOR (set only one target)\n",
    ),
    (
        ["--profile", "prod", "--emulator", "/x.db"],
        {},
        "sbdlq: conflicting options: --emulator and --profile prod (give only one target)\n",
    ),
    (
        [],
        {"SBDLQ_PROFILE": "prod", "SBDLQ_NAMESPACE": "other"},
        "sbdlq: conflicting environment variables: SBDLQ_NAMESPACE and SBDLQ_PROFILE=prod (set only one target)\n",
    ),
]


@pytest.mark.parametrize(("args", "env", "line"), CONFLICTS)
@pytest.mark.parametrize("command", [["count", "orders"], ["config", "show"]])
def test_two_targets_at_one_level_exit_2(
    run: Run, config: Path, command: list[str], args: list[str], env: dict[str, str], line: str
) -> None:
    write(config, LISTED)
    result = run(*args, *command, env=env)
    assert result == (2, "", line)
    assert KEY not in result.stderr


def test_timeout_is_not_a_target(run: Run, engine: Engine, store: Path) -> None:
    engine.create_queue("orders")
    result = run("--timeout", "5s", "--emulator", str(store), "count", "orders", "-o", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)[0]["entity"] == "orders"
    assert run("--timeout", "5s", "config", "show", "-o", "json").exit_code == 0


def test_profile_option_defaults_apply_to_commands(run: Run, config: Path, engine: Engine, store: Path) -> None:
    engine.create_queue("orders")
    write(config, f"default_profile: local\nprofiles:\n  local:\n    emulator: {store}\n    output: json\n")
    result = run("count", "orders")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"entity": "orders", "active": 0, "dead_letter": 0, "transfer_dead_letter": 0, "scheduled": 0}
    ]
    assert result.stderr == ""


def test_profile_emulator_path_is_relative_to_the_config_file(
    run: Run, config: Path, engine: Engine, store: Path
) -> None:
    engine.create_queue("orders")
    write(config, f"default_profile: local\nprofiles:\n  local:\n    emulator: ../{store.name}\n")
    assert store.parent == config.parent.parent
    assert rows(run("config", "show", "-o", "json"))["emulator"][0] == str(store)
    assert run("count", "orders", "-o", "jsonl").exit_code == 0


# ------------------------------------------------------------------ bad values from options and variables


def test_bad_connection_string_option_names_the_option(run: Run) -> None:
    assert run("--connection-string", f"Endpoint=sb://x.servicebus.windows.net/;SharedAccessKey={KEY}", "count") == (
        2,
        "",
        "sbdlq: --connection-string: the connection string has a SharedAccessKey but no SharedAccessKeyName\n",
    )


def test_bad_connection_string_variable_names_the_variable(run: Run) -> None:
    result = run("count", env={"SBDLQ_CONNECTION_STRING": f"sb://x;SharedAccessKey={KEY}"})
    assert result == (
        2,
        "",
        "sbdlq: SBDLQ_CONNECTION_STRING: malformed connection string: part 1 of 2 is not KEY=VALUE "
        # The hint's placeholder is masked like any key: stderr never carries SharedAccessKey=<anything>.
        "(expected Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=***)\n",
    )


def test_namespace_forms(run: Run) -> None:
    for given in ("contoso", "contoso.servicebus.windows.net", "sb://contoso.servicebus.windows.net/"):
        assert rows(run("--namespace", given, "config", "show", "-o", "json"))["namespace"] == (
            "contoso.servicebus.windows.net",
            "option --namespace",
        )
    assert run("--namespace", "con toso", "count") == (
        2,
        "",
        "sbdlq: --namespace: invalid namespace 'con toso' (use NAME or NAME.servicebus.windows.net)\n",
    )


# ------------------------------------------------------------------ bad config files

BAD_FILES = [
    (
        "invalid-yaml",
        "profiles: [unclosed\n",
        "invalid YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'",
    ),
    (
        "tab",
        "profiles:\n\tprod: {}\n",
        "invalid YAML at line 2, column 1: found character '\\t' that cannot start any token",
    ),
    ("top-level-list", "- prod\n", "expected a mapping with default_profile and profiles at the top level"),
    ("unknown-top-level", "default_profle: prod\n", "unknown field 'default_profle' (did you mean 'default_profile'?)"),
    ("profiles-list", "profiles:\n  - prod\n", "field 'profiles' must be a mapping of profile names to settings"),
    ("profile-scalar", "profiles:\n  prod: contoso\n", "profiles.prod must be a mapping of settings"),
    (
        "unknown-key-typo",
        "profiles:\n  prod:\n    outptu: json\n",
        "profiles.prod: unknown field 'outptu' (did you mean 'output'?)",
    ),
    (
        "unknown-key",
        "profiles:\n  prod:\n    colour: blue\n",
        "profiles.prod: unknown field 'colour' (known: connection_string, connection_string_env, namespace, "
        "emulator, output, timeout, concurrency, batch_size, transport, proxy, sdk_shortcuts)",
    ),
    (
        # A bare number is seconds (`timeout: 30`); a boolean is no duration.
        "timeout-boolean",
        "profiles:\n  prod:\n    timeout: yes\n",
        "profiles.prod.timeout must be a duration such as 30s or 2m",
    ),
    (
        "timeout-bad",
        "profiles:\n  prod:\n    timeout: soon\n",
        "profiles.prod.timeout must be a duration such as 30s or 2m, not 'soon'",
    ),
    (
        "output-bad",
        "profiles:\n  prod:\n    output: xml\n",
        "profiles.prod.output must be one of table, json, jsonl, yaml, tsv, none",
    ),
    (
        "namespace-number",
        "profiles:\n  prod:\n    namespace: 5\n",
        "profiles.prod.namespace must be a non-empty string",
    ),
    ("emulator-empty", "profiles:\n  prod:\n    emulator: ''\n", "profiles.prod.emulator must be a non-empty string"),
    (
        "concurrency-zero",
        "profiles:\n  prod:\n    concurrency: 0\n",
        "profiles.prod.concurrency must be a whole number of at least 1",
    ),
    (
        "batch-size-bool",
        "profiles:\n  prod:\n    batch_size: true\n",
        "profiles.prod.batch_size must be a whole number of at least 1",
    ),
    (
        "two-targets",
        "profiles:\n  prod:\n    namespace: contoso\n    emulator: /x.db\n",
        "profiles.prod sets both 'namespace' and 'emulator'; a profile has one target",
    ),
    (
        "default-missing",
        "default_profile: prod\nprofiles:\n  local:\n    emulator: /x.db\n",
        "default_profile 'prod' is not a profile (profiles: local)",
    ),
    (
        "default-no-profiles",
        "default_profile: prod\n",
        "default_profile 'prod' is not a profile (the file has no profiles)",
    ),
    ("default-list", "default_profile: [prod]\nprofiles: {}\n", "field 'default_profile' must be a profile name"),
    (
        "connection-string-malformed",
        f"profiles:\n  prod:\n    connection_string: 'SharedAccessKeyName=Root;SharedAccessKey={KEY}'\n",
        "profiles.prod.connection_string: the connection string has no Endpoint "
        "(add Endpoint=sb://NAMESPACE.servicebus.windows.net/)",
    ),
]


@pytest.mark.parametrize(("name", "text", "problem"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
@pytest.mark.parametrize("command", [["count", "orders"], ["config", "show"], ["config", "list"]])
def test_bad_config_file_is_one_line_naming_file_and_field(
    run: Run, config: Path, command: list[str], name: str, text: str, problem: str
) -> None:
    write(config, text)
    result = run(*command)
    assert result == (2, "", f"sbdlq: config file {config}: {problem}\n")
    assert KEY not in result.stderr


def test_a_target_option_does_not_bypass_a_broken_file(run: Run, config: Path) -> None:
    write(config, "profiles:\n  prod:\n    colour: blue\n")
    assert run("--emulator", "/x.db", "count").exit_code == 2


def test_config_file_is_a_directory(run: Run, config: Path) -> None:
    config.mkdir(parents=True)
    assert run("count", "orders") == (2, "", f"sbdlq: config file {config}: cannot read it: Is a directory\n")


def test_unknown_profile_names_where_it_was_asked_for(run: Run, config: Path) -> None:
    write(config, "profiles:\n  local:\n    emulator: /x.db\n")
    assert run("--profile", "nope", "count", "orders") == (
        2,
        "",
        f"sbdlq: --profile 'nope': no such profile in config file {config} (profiles: local)\n",
    )
    assert run("count", "orders", env={"SBDLQ_PROFILE": "nope"}) == (
        2,
        "",
        f"sbdlq: SBDLQ_PROFILE 'nope': no such profile in config file {config} (profiles: local)\n",
    )


def test_profile_without_a_config_file(run: Run, config: Path) -> None:
    assert run("--profile", "prod", "count", "orders") == (
        2,
        "",
        f"sbdlq: --profile 'prod': no config file at {config} (see `sbdlq config path`)\n",
    )


def test_connection_string_env_naming_an_unset_variable(run: Run, config: Path) -> None:
    write(config, "default_profile: staging\nprofiles:\n  staging:\n    connection_string_env: STAGING_SB_CONN\n")
    expected = (
        2,
        "",
        f"sbdlq: config file {config}: profiles.staging.connection_string_env: "
        "environment variable STAGING_SB_CONN is not set (export it, or pick a target)\n",
    )
    assert run("count", "orders") == expected
    # Showing the profile needs no secret: it says the variable is not set.
    shown = run("config", "show")
    assert shown.exit_code == 0, shown
    rows = [line.split("  ") for line in shown.stdout.splitlines()]
    assert [[cell.strip() for cell in row if cell.strip()] for row in rows][3] == [
        "connection_string_env",
        "STAGING_SB_CONN (not set)",
        "profile staging",
    ]
    # Overridden by a higher level, the unset variable doesn't matter.
    assert run("--emulator", "/x.db", "config", "show", "-o", "json").exit_code == 0


def test_connection_string_env_with_a_bad_value_names_the_field(run: Run, config: Path) -> None:
    write(config, "default_profile: staging\nprofiles:\n  staging:\n    connection_string_env: STAGING_SB_CONN\n")
    result = run(
        "count", "orders", env={"STAGING_SB_CONN": f"Endpoint=sb://x.servicebus.windows.net/;SharedAccessKey={KEY}"}
    )
    assert result == (
        2,
        "",
        f"sbdlq: config file {config}: profiles.staging.connection_string_env: "
        "the connection string has a SharedAccessKey but no SharedAccessKeyName\n",
    )


def test_empty_file_and_empty_profile_are_fine(run: Run, config: Path, data_dir: Path) -> None:
    write(config, "")
    assert rows(run("config", "show", "-o", "json"))["emulator"] == (default_store(data_dir), "default")
    write(config, "default_profile: p\nprofiles:\n  p:\n")
    assert rows(run("config", "show", "-o", "json"))["profile"] == ("p", "config default_profile")


# ------------------------------------------------------------------ resolve_target directly


@pytest.fixture
def listed(config: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write(config, LISTED)
    monkeypatch.setenv("SBDLQ_CONFIG", str(config))
    return config


def test_resolve_profile_levels(listed: Path) -> None:
    prod_option = {"profile": Setting("prod", Source.OPTION), "namespace": Setting("envns", Source.ENV)}
    assert resolve_target(options=prod_option).value == "contoso.servicebus.windows.net"
    prod_env = {"profile": Setting("prod", Source.ENV), "emulator": Setting("/o.db", Source.OPTION)}
    assert resolve_target(options=prod_env).value == "/o.db"
    with pytest.raises(BadInput, match="conflicting environment variables: SBDLQ_NAMESPACE and SBDLQ_PROFILE=prod"):
        resolve_target(options={"profile": Setting("prod", Source.ENV), "namespace": Setting("envns", Source.ENV)})
    # Without a recorded source, a named profile counts at the config-file level.
    assert resolve_target(options={"namespace": Setting("envns", Source.ENV)}, profile_name="prod").value == (
        "envns.servicebus.windows.net"
    )


def test_resolve_weighs_each_setting_by_its_source(listed: Path) -> None:
    # An option beats a profile chosen in the environment; a default loses to the default profile.
    options = {"profile": Setting("prod", Source.ENV), "emulator": Setting("/o.db", Source.OPTION)}
    assert resolve_target(options=options).value == "/o.db"
    assert resolve_target(options={"emulator": Setting("/o.db", Source.DEFAULT)}).source == "profile local"


def test_resolve_keeps_the_profile_for_option_defaults(listed: Path) -> None:
    target = resolve_target(options={"emulator": Setting("/o.db", Source.OPTION)})
    assert (target.kind, target.value, target.level, target.source) == ("emulator", "/o.db", Source.OPTION, "option")
    assert target.profile is not None and target.profile.name == "local"


def test_resolve_warns_only_through_the_callback(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(config, f'default_profile: keyed\nprofiles:\n  keyed:\n    connection_string: "{CONN}"\n', mode=0o604)
    monkeypatch.setenv("SBDLQ_CONFIG", str(config))
    said: list[str] = []
    target = resolve_target(options={}, warn=said.append)
    assert target.kind == "connection_string"
    assert said == [f"sbdlq: warning: {config} holds a secret and is readable by group or others (chmod 600 it)"]
    assert KEY not in target.describe()


#: proxy passwords of every shape an operator types: (as written in the URL, the secret parts)
PROXY_SECRETS = [
    ("http://ops:plain-secret@proxy.corp:3128", ["plain-secret"]),
    ("http://ops:p@ss@w0rd@proxy.corp:3128", ["p@ss", "ss@w0rd", "w0rd"]),
    ("http://ops:with:colons@proxy.corp:3128", ["with:colons", "colons"]),
    ("http://ops:pct%40encoded@proxy.corp:3128", ["pct%40encoded", "pct@encoded"]),
    ("https://ops:s3cr3t@[::1]:8443", ["s3cr3t"]),
    ("ops:bare-host-secret@proxy.corp:3128", ["bare-host-secret"]),
]


@pytest.mark.parametrize(("url", "secrets"), PROXY_SECRETS, ids=[s[0] for s in PROXY_SECRETS])
def test_no_config_command_prints_a_proxy_password(run: Run, config: Path, url: str, secrets: list[str]) -> None:
    quoted = url.replace("'", "''")
    profile = f"    namespace: contoso.servicebus.windows.net\n    proxy: '{quoted}'\n"
    write(config, f"default_profile: p\nprofiles:\n  p:\n{profile}")
    outputs = [
        run("config", "list"),
        run("config", "list", "-o", "json"),
        run("-v", "config", "show"),
        run("config", "show", "-o", "json"),
        run("config", "show", "p", "-o", "yaml"),
        run("--proxy", url, "-v", "config", "show"),
        run("config", "show", "-o", "json", env={"HTTPS_PROXY": url}),
    ]
    for result in outputs:
        assert result.exit_code == 0, result.stderr
        shown = result.stdout + result.stderr
        assert "proxy.corp" in shown or "[::1]" in shown  # the proxy is shown, its password is not
        for secret in secrets:
            assert secret not in shown, (secret, shown)


EMPTY_VAR = "is set but empty (set it to a target, or unset it)"


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (
            ["--connection-string", ""],
            {},
            "--connection-string was given an empty value (give the target, or leave the option out)",
        ),
        (["--namespace", " "], {}, "--namespace was given an empty value (give the target, or leave the option out)"),
        (["--emulator", ""], {}, "--emulator was given an empty value (give the target, or leave the option out)"),
        ([], {"SBDLQ_CONNECTION_STRING": ""}, f"environment variable SBDLQ_CONNECTION_STRING {EMPTY_VAR}"),
        ([], {"SBDLQ_NAMESPACE": ""}, f"environment variable SBDLQ_NAMESPACE {EMPTY_VAR}"),
        ([], {"SBDLQ_EMULATOR": " "}, f"environment variable SBDLQ_EMULATOR {EMPTY_VAR}"),
    ],
    ids=["option conn", "option namespace", "option emulator", "env conn", "env namespace", "env emulator"],
)
def test_an_empty_target_is_an_error_not_the_local_emulator(
    run: Run, data_dir: Path, args: list[str], env: dict[str, str], line: str
) -> None:
    """A CI step whose secret is unset (`--connection-string "$SB_CONN"`) must not purge the local
    emulator and report success."""
    Engine(default_store(data_dir)).close()  # a local emulator there to be (wrongly) used
    result = run(*args, "purge", "orders", "--yes", env=env)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"sbdlq: {line}\n")


def test_a_target_option_wins_over_an_empty_variable(run: Run, tmp_path: Path) -> None:
    store = tmp_path / "given.db"
    Engine(store).close()
    result = run("--emulator", str(store), "count", env={"SBDLQ_CONNECTION_STRING": ""})
    assert result.exit_code == 0, result.stderr
