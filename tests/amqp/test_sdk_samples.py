"""azure-servicebus 7.12.2's own samples, unmodified, against `sbdlq emulator serve` (issue 13).

One emulator (the real CLI, in its own process) serves every sample; each sample has its
own entities from a Config.json, runs as a subprocess with a timeout, and is checked by its
exit code and by the entity counts it leaves. The selected samples run in parallel (they
mostly wait), so the module takes about as long as its longest sample.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

import sdk_samples as samples

# Minutes of real SDK samples (auto_lock_renew sleeps 100 s by design): CI runs them; `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

_PARALLEL = 6
_SBDLQ = [sys.executable, "-m", "sbdlq"]
_CONN = "Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
# The admin client's https, on serve --tls's admin port (the certificate names localhost).
_HTTPS_CONN = "Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"


def _discover() -> tuple[list[samples.Sample], str | None]:
    try:
        return samples.discover(samples.fetch()), None
    except samples.SamplesUnavailable as exc:
        return [], str(exc)


_SAMPLES, _UNAVAILABLE = _discover()


def _params() -> list[Any]:
    if _UNAVAILABLE is not None:
        return [pytest.param(None, id="unavailable", marks=pytest.mark.skip(reason=_UNAVAILABLE))]
    params = []
    for s in _SAMPLES:
        marks: list[Any] = []
        if s.stem in samples.EXCLUDED:
            marks.append(pytest.mark.skip(reason=samples.EXCLUDED[s.stem]))
        elif s.stem in samples.NOT_YET:
            marks.append(pytest.mark.xfail(strict=True, reason=samples.NOT_YET[s.stem]))
        params.append(pytest.param(s, id=s.id, marks=marks))
    return params


def _cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_SBDLQ, *args], capture_output=True, text=True, check=False, **kw)


class _Farm:
    """The emulator process and the sample runs, started once for the module."""

    def __init__(self, workdir: Path, selected: list[samples.Sample]) -> None:
        self.workdir = workdir
        self.store = workdir / "emulator.db"
        config = workdir / "Config.json"
        config.write_text(samples.config_json(selected))
        init = _cli("--emulator", str(self.store), "emulator", "init", "--config", str(config))
        assert init.returncode == 0, init.stderr
        ports = ["--port", "0", "--tls-port", "0", "--http-port", "0"]
        self.server = subprocess.Popen(
            [*_SBDLQ, "--emulator", str(self.store), "emulator", "serve", "--tls", *ports],
            stdout=subprocess.PIPE,
            stderr=(workdir / "serve.log").open("w"),
            text=True,
            env={**os.environ, "XDG_STATE_HOME": str(workdir / "state")},  # its own CA
        )
        assert self.server.stdout is not None
        line = self.server.stdout.readline()
        found = re.search(r"amqp://[^:]+:(\d+).*\(https [^:]+:(\d+)\)", line)
        assert found, f"emulator serve did not start: {line!r}"
        said = "".join(self.server.stdout.readline() for _ in range(6))
        ca = re.search(r"trust the emulator's CA (.+):\n", said)
        assert ca, said
        self.reach = samples.Reach(
            _CONN.format(port=found.group(1)), _HTTPS_CONN.format(port=found.group(2)), ca.group(1)
        )
        from sbdlq.emulator.engine import Engine

        self.engine = Engine(self.store)
        for s in selected:
            self._seed(s)
        self.pool = ThreadPoolExecutor(_PARALLEL)
        # the long ones first, so the module takes about as long as the longest
        order = sorted(selected, key=lambda s: -s.timeout)
        self.runs: dict[str, Future[samples.Run]] = {
            s.id: self.pool.submit(samples.run, s, self.reach, workdir) for s in order
        }

    def _seed(self, sample: samples.Sample) -> None:
        from sbdlq.models import OutboundMessage
        from sbdlq.paths import parse_entity

        for key, n in sample.seed.items():
            messages = [OutboundMessage(body=f"seed {i}".encode()) for i in range(n)]
            self.engine.send(parse_entity(sample.entity(key)), messages)

    def counts(self, entity: str) -> tuple[int, int]:
        c = self.engine.counts(entity)
        return c.active + c.scheduled, c.dead_letter

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.server.terminate()
        try:
            self.server.wait(15)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.engine.close()


@pytest.fixture(scope="module")
def farm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Farm]:
    wanted = {item.callspec.id for item in request.session.items if item.module is request.module}  # type: ignore[attr-defined]
    selected = [s for s in _SAMPLES if s.id in wanted and s.stem not in samples.EXCLUDED]
    farm = _Farm(tmp_path_factory.mktemp("sdk-samples"), selected)
    yield farm
    farm.close()


@pytest.mark.parametrize("sample", _params())
def test_sample(sample: samples.Sample, farm: _Farm) -> None:
    run = farm.runs[sample.id].result()
    if sample.stem in samples.LOOPING:
        assert run.returncode in (None, 0), f"{sample.id} failed ({run.returncode}):\n{run.tail()}"
    else:
        assert run.returncode is not None, f"{sample.id} did not finish in {sample.timeout:.0f} s:\n{run.tail()}"
        assert run.returncode == 0, f"{sample.id} exited {run.returncode}:\n{run.tail()}"
    for key, expected in sample.expect.items():
        got = farm.counts(sample.entity(key))
        assert got == expected, f"{sample.entity(key)}: (active, dead-letter) {got}, expected {expected}\n{run.tail()}"
