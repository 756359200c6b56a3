"""A corpus of dead-letter failures: root causes from .NET, Java, Python, Node, SQL and HTTP stacks.

Each cause writes its description many ways, as a real outage does: order ids, GUIDs in either
case, amounts, timestamps, durations, hosts, IPs, e-mail addresses and quoted values vary;
the words do not. Some causes are near misses of another (the same reason with other words, or
the same words under another reason): grouping must keep them apart.

The generator is seeded: the corpus is the same on every machine. The whole corpus (PER_CAUSE
messages a cause) is made when a test asks for it; tests/data/fingerprint_corpus.jsonl keeps
the first KEPT_PER_CAUSE of each cause, to read, and a test checks the generator still writes
it (`PYTHONPATH=tests python -m support.fingerprint_corpus` rewrites it).
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "data" / "fingerprint_corpus.jsonl"
PER_CAUSE = 200
KEPT_PER_CAUSE = 12
SEED = 36


@dataclass(frozen=True)
class Cause:
    name: str
    reason: str
    describe: Callable[[random.Random], str]


def _guid(r: random.Random) -> str:
    text = "-".join("".join(r.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12))
    return text.upper() if r.random() < 0.3 else text


def _hex(r: random.Random, n: int) -> str:
    return "".join(r.choice("0123456789abcdef") for _ in range(n))


def _ip(r: random.Random) -> str:
    return f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"


def _timestamp(r: random.Random) -> str:
    fraction = f".{r.randint(0, 9999999):07d}" if r.random() < 0.5 else ""
    zone = r.choice(["Z", "+00:00", "+02:00", ""])
    date = f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
    return f"{date}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}{fraction}{zone}"


def _region(r: random.Random) -> str:
    return r.choice(["eu-west-1", "eu-north-1", "us-east-2", "ap-south-1", "westeurope2"])


def _name(r: random.Random) -> str:
    first = r.choice(["Jane", "Ravi", "Ana", "Li", "Tomasz", "Olu"])
    last = r.choice(["Doe", "Kumar", "García Ruiz", "Wei", "Nowak", "Adeyemi"])
    return f"{first} {last}"


def _email(r: random.Random) -> str:
    user = "".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(3, 9)))
    tag = r.choice(["", ".ops", "+billing"])
    return f"{user}{tag}@{r.choice(['example.org', 'contoso.com', 'mail.example.co.uk'])}"


def _sql_pk(r: random.Random) -> str:
    return (
        "Microsoft.Data.SqlClient.SqlException (0x80131904): Violation of PRIMARY KEY constraint 'PK_Orders'. "
        f"Cannot insert duplicate key in object 'dbo.Orders'. The duplicate key value is ({_guid(r)}).\r\n"
        f"The statement has been terminated.\r\nClientConnectionId:{_guid(r)}\r\n"
        f"Error Number:2627,State:{r.randint(1, 2)},Class:14"
    )


def _sql_fk(r: random.Random) -> str:
    return (
        "org.springframework.dao.DataIntegrityViolationException: could not execute statement; SQL [n/a]; "
        "constraint [fk_order_customer]; nested exception is org.hibernate.exception.ConstraintViolationException: "
        f'ERROR: insert or update on table "orders" violates foreign key constraint "fk_order_customer"\n'
        f'  Detail: Key (customer_id)=({r.randint(1, 10**7)}) is not present in table "customers".'
    )


def _http_503(r: random.Random) -> str:
    return (
        "System.Net.Http.HttpRequestException: Response status code does not indicate success: 503 "
        f"(Service Unavailable). POST https://pay.example.com/v2/charge/ch_{_hex(r, r.choice([8, 12, 16]))} "
        f"failed after {r.randint(50, 30000)}ms (attempt {r.randint(1, 5)} of 5)"
    )


def _http_404(r: random.Random) -> str:
    return (
        "System.Net.Http.HttpRequestException: Response status code does not indicate success: 404 "
        f"(Not Found). GET https://inventory.internal/api/items/SKU-{r.randint(1000, 999999)}?warehouse="
        f"{_region(r)} failed after {r.randint(5, 900)}ms (attempt 1 of 5)"
    )


def _java_timeout(r: random.Random) -> str:
    return (
        f"java.net.SocketTimeoutException: Read timed out after {r.choice([5000, 10000, 30000])} ms calling "
        f"http://{_ip(r)}:{r.choice([8080, 8443, 9000])}/orders/"
        f"ORD-{r.randint(2019, 2025)}-{r.randint(1, 999999):06d}\n"
        f"\tat java.base/sun.nio.ch.NioSocketImpl.timedRead(NioSocketImpl.java:{r.randint(280, 290)})\n"
        f"\tat com.contoso.orders.ShippingClient.book(ShippingClient.java:{r.randint(40, 140)})"
    )


def _pydantic(r: random.Random) -> str:
    value = r.choice(["0", f"-{r.randint(1, 99999) / 100}", f"-{r.randint(1, 500)}"])
    return (
        "1 validation error for OrderCreated\namount\n  Input should be greater than 0 "
        f"[type=greater_than, input_value={value}, input_type=float]\n"
        f"    For further information visit https://errors.pydantic.dev/2.{r.randint(4, 9)}/v/greater_than"
    )


def _python_key(r: random.Random) -> str:
    release = f"{r.randint(2023, 2024)}{r.randint(1, 12):02d}{r.randint(1, 28):02d}-{r.randint(1, 9999)}"
    return (
        "Traceback (most recent call last):\n"
        f'  File "/app/releases/{release}/handlers/order.py", line {r.randint(80, 99)}, in handle\n'
        "    customer = payload['customer_id']\n"
        f"KeyError: 'customer_id' (message {_guid(r)})"
    )


def _node_json(r: random.Random) -> str:
    return (
        f"SyntaxError: Unexpected token }} in JSON at position {r.randint(0, 65535)}\n"
        "    at JSON.parse (<anonymous>)\n"
        f"    at OrderConsumer.handle (/srv/app/dist/consumer.js:{r.randint(1, 400)}:{r.randint(1, 80)})\n"
        f"    at processTicksAndRejections (node:internal/process/task_queues:{r.randint(60, 99)}:{r.randint(1, 9)})"
    )


def _node_redis(r: random.Random) -> str:
    where = r.choice([f"{_ip(r)}:6379", "127.0.0.1:6379", "[::1]:6379"])
    return (
        f"Error: connect ECONNREFUSED {where}\n"
        f"    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:{r.randint(1400, 1700)}:16)"
    )


def _order_not_found(r: random.Random) -> str:
    return f"Order {r.randint(1, 10**6)} not found in store {_region(r)}"


def _customer_not_found(r: random.Random) -> str:
    return f"Customer {r.randint(1, 10**6)} not found in store {_region(r)}"


def _smtp(r: random.Random) -> str:
    return (
        f"SMTP 550 5.1.1 <{_email(r)}>: Recipient address rejected: User unknown in virtual mailbox table "
        f"(queued as {_hex(r, 10).upper()}, {_timestamp(r)})"
    )


def _lock_lost(r: random.Random) -> str:
    return (
        "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the "
        f"queue. Reference:{_guid(r)}, TrackingId:{_guid(r)}_G{r.randint(0, 30)}, "
        f"SystemTracker:sb-prod-{r.randint(1, 9):02d}:Queue:orders, "
        f"Timestamp:{r.randint(1, 12)}/{r.randint(1, 28)}/2024 "
        f"{r.randint(1, 12)}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d} {r.choice(['AM', 'PM'])}"
    )


def _jackson(r: random.Random) -> str:
    text = f"{r.randint(1, 12):02d}/{r.randint(1, 28):02d}/2024 {r.randint(0, 23)}:{r.randint(0, 59):02d}"
    return (
        f'Cannot deserialize value of type `java.time.Instant` from String "{text}": Failed to deserialize '
        f"java.time.Instant: (java.time.format.DateTimeParseException) Text '{text}' could not be parsed at index 0\n"
        f' at [Source: (String)"{{"placedAt":"{text}","customer":"{_name(r)}"}}"; '
        f"line: 1, column: {r.randint(10, 90)}]"
    )


def _quota(r: random.Random) -> str:
    return (
        f"Customer '{_name(r)}' ({_email(r)}) exceeded the daily limit: {r.randint(101, 5000)} of 100 requests "
        f"since {_timestamp(r)}; retry in {r.randint(1, 86399)}s from {_ip(r)}"
    )


#: Every cause. Near misses: the two HttpRequestException causes share a reason; OrderNotFound's
#: two causes differ in one word; ValidationError's pydantic cause shares words with none.
CAUSES: tuple[Cause, ...] = (
    Cause("dotnet-sql-primary-key", "SqlException", _sql_pk),
    Cause("java-postgres-foreign-key", "DataIntegrityViolation", _sql_fk),
    Cause("dotnet-http-503", "HttpRequestException", _http_503),
    Cause("dotnet-http-404", "HttpRequestException", _http_404),
    Cause("java-socket-timeout", "ShippingUnavailable", _java_timeout),
    Cause("python-pydantic", "ValidationError", _pydantic),
    Cause("python-key-error", "ProcessingError", _python_key),
    Cause("node-json", "DeserializationFailed", _node_json),
    Cause("node-redis", "ProcessingError", _node_redis),
    Cause("order-not-found", "OrderNotFound", _order_not_found),
    Cause("customer-not-found", "OrderNotFound", _customer_not_found),
    Cause("smtp-recipient", "NotificationFailed", _smtp),
    Cause("dotnet-lock-lost", "MessageLockLost", _lock_lost),
    Cause("java-jackson-instant", "DeserializationFailed", _jackson),
    Cause("quota", "RateLimited", _quota),
    # the same words as order-not-found under another reason: another failure
    Cause("order-not-found-max-delivery", "MaxDeliveryCountExceeded", _order_not_found),
)


def generate(per_cause: int = PER_CAUSE, seed: int = SEED) -> list[dict[str, str]]:
    """The corpus's records, causes interleaved as an outage mixes them, in a seeded order."""
    r = random.Random(seed)
    records = [
        {"cause": c.name, "reason": c.reason, "description": c.describe(r)} for c in CAUSES for _ in range(per_cause)
    ]
    r.shuffle(records)
    return records


def render(records: list[dict[str, str]]) -> str:
    """The records as JSON lines."""
    return "".join(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n" for rec in records)


def kept() -> list[dict[str, str]]:
    """The part of the corpus kept in tests/data: the first KEPT_PER_CAUSE of each cause, in corpus order."""
    seen: dict[str, int] = {}
    out = []
    for rec in generate():
        seen[rec["cause"]] = seen.get(rec["cause"], 0) + 1
        if seen[rec["cause"]] <= KEPT_PER_CAUSE:
            out.append(rec)
    return out


def load() -> list[dict[str, str]]:
    """The corpus as kept in tests/data."""
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


if __name__ == "__main__":
    CORPUS.parent.mkdir(exist_ok=True)
    CORPUS.write_text(render(kept()), encoding="utf-8")
    print(f"wrote {CORPUS}")
