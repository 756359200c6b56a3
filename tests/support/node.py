"""The JavaScript SDK (@azure/service-bus) under node, installed once into a cache folder.

Tests that run it skip, with the reason, where node or npm is missing or npm cannot reach its
registry. The install is shared by every pytest run and xdist worker (a lock file makes them
take turns) and kept under ~/.cache/sbdlq-tests/node, so only the first run pays for it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

#: the release the outside run used (issue 37); change it here only
JS_SDK = "@azure/service-bus@7.9.5"
_INSTALL_SECONDS = 300
_CACHE = Path(os.environ.get("SBDLQ_NODE_CACHE", Path.home() / ".cache" / "sbdlq-tests" / "node"))


def node_sdk() -> Path:
    """The folder whose node_modules holds the JavaScript SDK; skips the test with the reason if it cannot be had."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run the JavaScript SDK (not on this machine)")
    folder = _CACHE / JS_SDK.replace("@", "").replace("/", "-")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "node_modules" / "@azure" / "service-bus" / "package.json").exists():
            return folder
        (folder / "package.json").write_text(json.dumps({"name": "sbdlq-js-sdk-probe", "private": True}))
        try:
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--no-save", JS_SDK],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=_INSTALL_SECONDS,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm install {JS_SDK} took over {_INSTALL_SECONDS} s (is its registry reachable?)")
        if done.returncode != 0:
            pytest.skip(f"npm install {JS_SDK} failed (registry unreachable?): {_npm_reason(done.stderr)}")
    return folder


def _npm_reason(stderr: str) -> str:
    """npm's own reason for a failed install (its error code and the request's failure), not its log line."""
    lines = [line.removeprefix("npm error").strip() for line in stderr.splitlines() if line.startswith("npm error")]
    told = [line for line in lines if line.startswith(("code ", "FetchError", "network", "request to"))]
    return "; ".join(told[:2]) or (lines or [stderr.strip() or "no output"])[0]


def run_node(folder: Path, script: str, *args: str, ca: Path | None = None, timeout: float = 120) -> dict[str, Any]:
    """Run a node script with the SDK on its path; the JSON object it prints last. Fails with its stderr.

    ca: a CA certificate node trusts besides its own (the emulator's local CA, for TLS).
    """
    env = {**os.environ, **({"NODE_EXTRA_CA_CERTS": str(ca)} if ca is not None else {})}
    done = subprocess.run(
        ["node", "-e", script, "--", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"node exited {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])
