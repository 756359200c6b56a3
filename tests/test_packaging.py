"""One version, and a wheel and sdist that hold the whole package and a working `sbdlq`.

The version lives only in sbdlq/__init__.py; `sbdlq --version` and the built metadata read
it. The build runs like `python -m build` (which is not installed here): the sdist through
setuptools' PEP 517 hook, with the setuptools release pyproject.toml asks for downloaded
into a temporary folder, then the wheel from that sdist with `pip wheel`, as pip and pipx
do. It needs the package index, as any build does. Shell completions are not packaged: they
live in completions/ (see the README).
"""

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sbdlq
from sbdlq.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
VERSION = sbdlq.__version__
# Left out of the copy that is built: environments, caches and earlier build output.
IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "results", "*.db"
)


def test_version_has_one_source() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", VERSION), VERSION
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "sbdlq.__version__"}


def test_version_option() -> None:
    from sbdlq.backends.servicebus.shortcuts import describe

    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"sbdlq {VERSION}\n{describe()}\n", "")
    assert describe().startswith(f"azure-servicebus {version('azure-servicebus')}, shortcuts ")


def test_license_is_an_spdx_expression() -> None:
    assert PYPROJECT["project"]["license"] == "MIT"
    # PEP 639: an SPDX license and License :: classifiers don't mix.
    assert not [c for c in PYPROJECT["project"]["classifiers"] if c.startswith("License ::")]


def source_modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "sbdlq").rglob("*.py") if "__pycache__" not in p.parts}


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """{"sdist": ..., "wheel": ...} built from a copy of the working tree."""
    tmp = tmp_path_factory.mktemp("build")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    backend = tmp / "backend"
    requires = PYPROJECT["build-system"]["requires"]
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(tmp / "dl"),
            *requires,
        ]
    )
    for wheel in (tmp / "dl").glob("*.whl"):
        zipfile.ZipFile(wheel).extractall(backend)
    out = tmp / "dist"
    env = {**os.environ, "PYTHONPATH": str(backend)}
    hook = "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))"
    name = run([sys.executable, "-c", hook, str(out)], cwd=src, env=env).stdout.strip().splitlines()[-1]
    sdist = out / name
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(sdist)])
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    yield {"sdist": sdist, "wheel": wheels[0], "tmp": tmp}


def test_sdist_holds_the_package(built: dict[str, Path]) -> None:
    sdist = built["sdist"]
    assert sdist.name == f"sbdlq-{VERSION}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        pkg_info = tar.extractfile(f"sbdlq-{VERSION}/PKG-INFO")
        assert pkg_info is not None
        meta = email.parser.Parser().parsestr(pkg_info.read().decode())
    assert {"PKG-INFO", "pyproject.toml", "README.md"} <= names
    assert source_modules() <= names, sorted(source_modules() - names)
    assert meta["Version"] == VERSION


def wheel_metadata(wheel: Path) -> tuple[set[str], email.message.Message, str]:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = f"sbdlq-{VERSION}.dist-info"
        meta = email.parser.Parser().parsestr(z.read(f"{info}/METADATA").decode())
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    return names, meta, entry_points


def test_wheel_holds_the_package_the_script_and_the_metadata(built: dict[str, Path]) -> None:
    wheel = built["wheel"]
    assert wheel.name == f"sbdlq-{VERSION}-py3-none-any.whl"
    names, meta, entry_points = wheel_metadata(wheel)
    assert source_modules() <= names, sorted(source_modules() - names)
    assert {n.split("/")[0] for n in names} == {"sbdlq", f"sbdlq-{VERSION}.dist-info"}
    assert "[console_scripts]\nsbdlq = sbdlq.entry:main\n" in entry_points
    assert meta["Name"] == "sbdlq"
    assert meta["Version"] == VERSION
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == PYPROJECT["project"]["requires-python"]
    assert meta.get_all("Classifier") == PYPROJECT["project"]["classifiers"]
    plain = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert sorted(_canonical(r) for r in plain) == sorted(_canonical(d) for d in PYPROJECT["project"]["dependencies"])
    assert str(meta.get_payload()).startswith("# sbdlq\n")  # the README is the long description


def _canonical(requirement: str) -> str:
    """`typer>=0.15,<0.25` as setuptools writes it (`typer<0.25,>=0.15`)."""
    m = re.match(r"([A-Za-z0-9_.-]+)(.*)", requirement.replace(" ", ""))
    assert m is not None
    name, spec = m.groups()
    return (name + ",".join(sorted(spec.split(",")))).lower() if spec else name.lower()


def test_the_wheel_runs_on_its_own(built: dict[str, Path]) -> None:
    """The wheel's files alone (not the working tree) give `python -m sbdlq --version` and the package."""
    site = built["tmp"] / "site"
    zipfile.ZipFile(built["wheel"]).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = run([sys.executable, "-c", "import sbdlq; print(sbdlq.__file__)"], cwd=site.parent, env=env).stdout
    assert Path(where.strip()).is_relative_to(site)
    result = run([sys.executable, "-m", "sbdlq", "--version"], cwd=site.parent, env=env)
    assert result.stdout.startswith(f"sbdlq {VERSION}\nazure-servicebus ")
    result = run(
        [sys.executable, "-m", "sbdlq", "config", "path"], cwd=site.parent, env={**env, "SBDLQ_CONFIG": "/x.yaml"}
    )
    assert result.stdout == "/x.yaml\n"
