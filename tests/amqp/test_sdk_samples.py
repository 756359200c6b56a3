"""azure-servicebus 7.12.2's own samples, unmodified, against `sbdlq emulator serve` (issue 13).

One emulator (the real CLI, in its own process) serves the samples; each sample has its
own entities from a Config.json, runs as a subprocess with a timeout, and is checked by its
exit code and by the entity counts it leaves. The selected samples run in parallel (they
mostly wait), so the module takes about as long as its longest sample. The few that can only
dial AMQPS on 5671 get a second serve there, under the lock other 5671 tests take (issue 27).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton")

import sdk_samples as samples
from support.serve import AMQPS_PORT, amqps_port

# Minutes of real SDK samples (auto_lock_renew sleeps 100 s by design): CI runs them; `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

_PARALLEL = 6
_SBDLQ = [sys.executable, "-m", "sbdlq"]
_CONN = "Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
# The admin client's https, on serve --tls's admin port (the certificate names localhost).
_HTTPS_CONN = (
    "Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
)


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


class _Serve:
    """One `emulator serve --tls` process (the real CLI) on a store of its own, holding the
    entities of its samples: the farm's on free ports, and the ON_5671 samples' on 5671."""

    def __init__(self, workdir: Path, selected: list[samples.Sample], state: Path, tls_port: int = 0) -> None:
        workdir.mkdir()
        self.store = workdir / "emulator.db"
        config = workdir / "Config.json"
        config.write_text(samples.config_json(selected))
        init = _cli("--emulator", str(self.store), "emulator", "init", "--config", str(config))
        assert init.returncode == 0, init.stderr
        ports = ["--port", "0", "--tls-port", str(tls_port), "--http-port", "0"]
        self.server = subprocess.Popen(
            [*_SBDLQ, "--emulator", str(self.store), "emulator", "serve", "--tls", *ports],
            stdout=subprocess.PIPE,
            stderr=(workdir / "serve.log").open("w"),
            text=True,
            env={**os.environ, "XDG_STATE_HOME": str(state)},  # the farm's own CA
        )
        try:
            self.reach = self._reach(workdir, on_5671=tls_port == AMQPS_PORT)
        except BaseException:
            self.server.kill()
            self.server.wait()
            raise
        from sbdlq.emulator.engine import Engine

        self.engine = Engine(self.store)
        for s in selected:
            self._seed(s)

    def _reach(self, workdir: Path, *, on_5671: bool) -> samples.Reach:
        """The connection strings and CA that serve prints once it listens."""
        assert self.server.stdout is not None
        line = self.server.stdout.readline()
        found = re.search(r"amqp://[^:]+:(\d+).*\(https [^:]+:(\d+)\)", line)
        assert found, f"emulator serve did not start: {line!r}"
        said = "".join(self.server.stdout.readline() for _ in range(6))
        ca = re.search(r"trust the emulator's CA (.+):\n", said)
        assert ca, said
        trusting = samples.certifi_trusting(Path(ca.group(1)), workdir / "trust") if on_5671 else None
        return samples.Reach(
            _CONN.format(port=found.group(1)), _HTTPS_CONN.format(port=found.group(2)), ca.group(1), trusting
        )

    def _seed(self, sample: samples.Sample) -> None:
        from sbdlq.addresses import parse_entity
        from sbdlq.models import OutboundMessage

        for key, n in sample.seed.items():
            messages = [OutboundMessage(body=f"seed {i}".encode()) for i in range(n)]
            self.engine.send(parse_entity(sample.entity(key)), messages)

    def counts(self, entity: str) -> tuple[int, int]:
        c = self.engine.counts(entity)
        return c.active + c.scheduled, c.dead_letter

    def close(self) -> None:
        self.server.terminate()
        try:
            self.server.wait(60)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.engine.close()


class _Farm:
    """The emulator processes and the sample runs, started once for the whole test run.

    Each run's outcome is written to `results` as `<id>.json`, so that the tests of every
    pytest-xdist worker read the one farm's results (see `farm`). The ON_5671 samples run one
    after the other (they are short) against a second serve on 5671, while the farm holds the
    5671 lock that `tests/amqp/test_sdk_tls.py` takes too (`lock_root` is where it lives).
    """

    def __init__(self, workdir: Path, selected: list[samples.Sample], results: Path, lock_root: Path) -> None:
        self.workdir = workdir
        self.results = results
        self.lock_root = lock_root
        self.state = workdir / "state"  # both serves share one CA
        on_5671 = [s for s in selected if s.stem in samples.ON_5671]
        plain = [s for s in selected if s.stem not in samples.ON_5671]
        self.serve = _Serve(workdir / "serve", plain, self.state)
        self.pool = ThreadPoolExecutor(_PARALLEL)
        if on_5671:  # first: it waits for the lock, and its serve starts while the others run
            self.pool.submit(self._run_on_5671, on_5671)
        # the long ones first, so the farm takes about as long as the longest
        for s in sorted(plain, key=lambda s: -s.timeout):
            self.pool.submit(self._run, self.serve, s)

    def _run(self, serve: _Serve, sample: samples.Sample) -> None:
        """Run one sample and write its outcome (the counts it left, or why it could not run)."""
        outcome: dict[str, Any]
        try:
            run = samples.run(sample, serve.reach, self.workdir)
            counts = {key: serve.counts(sample.entity(key)) for key in sample.expect}
            outcome = {"returncode": run.returncode, "tail": run.tail(), "counts": counts}
        except Exception as exc:  # written, so that the waiting test fails with it instead of hanging
            outcome = {"error": repr(exc)}
        self._write(sample, outcome)

    def _run_on_5671(self, group: list[samples.Sample]) -> None:
        """Run the ON_5671 samples against a serve on 5671, or skip them when the port is taken."""
        try:
            with amqps_port(self.lock_root) as taken:
                if taken is not None:
                    why = f"{taken}: this sample dials AMQPS on {AMQPS_PORT}, whatever port its endpoint names"
                    for s in group:
                        self._write(s, {"skip": why})
                    return
                serve = _Serve(self.workdir / "serve-5671", group, self.state, tls_port=AMQPS_PORT)
                try:
                    for s in group:
                        self._run(serve, s)
                finally:
                    serve.close()
        except Exception as exc:  # the serve did not start: every sample of the group says why
            for s in group:
                if not (self.results / f"{s.id}.json").exists():
                    self._write(s, {"error": f"the serve on {AMQPS_PORT}: {exc!r}"})

    def _write(self, sample: samples.Sample, outcome: dict[str, Any]) -> None:
        partial = self.results / f"{sample.id}.json.part"
        partial.write_text(json.dumps(outcome))
        partial.rename(self.results / f"{sample.id}.json")  # atomic: a reader sees all of it or nothing

    def close(self) -> None:
        # Every run finishes (each within its own timeout): other workers' tests wait for them.
        self.pool.shutdown(wait=True)
        self.serve.close()


def _outcome(results: Path, sample: samples.Sample, guard_s: float) -> dict[str, Any]:
    """The farm's outcome for `sample`, once written; `guard_s` is a hang guard (the farm kills
    each sample at its own timeout, so it always writes one unless its process died)."""
    path = results / f"{sample.id}.json"
    deadline = time.monotonic() + guard_s
    while not path.exists():
        assert time.monotonic() < deadline, f"no outcome for {sample.id} within {guard_s:.0f} s"
        time.sleep(0.5)  # a polling interval: the outcome is a file another process writes
    return dict(json.loads(path.read_text()))


@pytest.fixture(scope="module")
def farm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, float]]:
    """Where the sample outcomes appear, and how long to wait for one at most.

    Under pytest-xdist every worker that runs one of these tests sets this fixture up, and each
    sees every selected sample in its session: a farm per worker ran every sample up to eight
    times at once (the two auto_lock_renew runs take 288 s each) and loaded the machine for the
    rest of the suite. The first worker to get here claims the farm; the others read its results.
    """
    wanted = {item.callspec.id for item in request.session.items if item.module is request.module}  # type: ignore[attr-defined]
    selected = [s for s in _SAMPLES if s.id in wanted and s.stem not in samples.EXCLUDED]
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's, not this worker's
    results = shared / "sdk-samples-results"
    # Each sample is killed at its own timeout, _PARALLEL at a time: the farm is done by then.
    guard_s = 600 + sum(s.timeout for s in selected) / _PARALLEL
    try:
        (shared / "sdk-samples.claim").touch(exist_ok=False)
    except FileExistsError:
        yield results, guard_s  # another worker runs the farm
        return
    results.mkdir()
    # the 5671 lock's folder, as tests/amqp/test_sdk_tls.py finds it
    running = _Farm(tmp_path_factory.mktemp("sdk-samples"), selected, results, base.parent)
    yield results, guard_s
    running.close()


@pytest.mark.parametrize("sample", _params())
def test_sample(sample: samples.Sample, farm: tuple[Path, float]) -> None:
    results, guard_s = farm
    outcome = _outcome(results, sample, guard_s)
    if "skip" in outcome:
        pytest.skip(outcome["skip"])
    assert "error" not in outcome, f"{sample.id} could not run: {outcome.get('error')}"
    code, tail = outcome["returncode"], outcome["tail"]
    if sample.stem in samples.LOOPING:
        assert code in (None, 0), f"{sample.id} failed ({code}):\n{tail}"
    else:
        assert code is not None, f"{sample.id} did not finish in {sample.timeout:.0f} s:\n{tail}"
        assert code == 0, f"{sample.id} exited {code}:\n{tail}"
    for key, expected in sample.expect.items():
        got = tuple(outcome["counts"][key])
        assert got == expected, f"{sample.entity(key)}: (active, dead-letter) {got}, expected {expected}\n{tail}"
