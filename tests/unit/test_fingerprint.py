"""Fingerprints (DESIGN §5): masks, stable ids, and a corpus of real-looking failures that groups exactly."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

import pytest
from support.fingerprint_corpus import CAUSES, PER_CAUSE, generate, kept, load, render

from sbdlq.errors import BadInput
from sbdlq.fingerprint import fingerprint, mask, parse_fingerprint_id

#: The id of each cause of the corpus. Ids are a contract (scripts keep them): a change here is a
#: change of VERSION and a CHANGELOG line, never a quiet update of this table.
PINNED = {
    "dotnet-sql-primary-key": "9c4ede11",
    "java-postgres-foreign-key": "bf5948c8",
    "dotnet-http-503": "bf79c981",
    "dotnet-http-404": "e9fbf1e6",
    "java-socket-timeout": "47fb894f",
    "python-pydantic": "ef284851",
    "python-key-error": "8c253618",
    "node-json": "10b50350",
    "node-redis": "7863f1a6",
    "order-not-found": "f1953cc8",
    "customer-not-found": "4abda133",
    "smtp-recipient": "33c195a8",
    "dotnet-lock-lost": "6750f542",
    "java-jackson-instant": "58a189c0",
    "quota": "addcc13a",
    "order-not-found-max-delivery": "3564a8db",
}


def test_the_corpus_groups_exactly_into_its_causes() -> None:
    records = generate()
    assert len(CAUSES) >= 8 and len(records) == len(CAUSES) * PER_CAUSE
    causes_of: dict[str, set[str]] = defaultdict(set)
    ids_of: dict[str, set[str]] = defaultdict(set)
    for rec in records:
        fp = fingerprint(rec["reason"], rec["description"])
        causes_of[fp.id].add(rec["cause"])
        ids_of[rec["cause"]].add(fp.id)
    assert {cause: ids for cause, ids in ids_of.items() if len(ids) > 1} == {}  # no cause split
    assert {fid: c for fid, c in causes_of.items() if len(c) > 1} == {}  # no two causes merged
    assert {cause: ids.pop() for cause, ids in ids_of.items()} == PINNED


def test_the_descriptions_really_vary() -> None:
    # A corpus of identical texts would group exactly under any scheme.
    records = generate()
    for cause in CAUSES:
        texts = {r["description"] for r in records if r["cause"] == cause.name}
        assert len(texts) > PER_CAUSE // 2, cause.name


def test_the_kept_corpus_is_what_the_generator_writes() -> None:
    assert load() == kept()
    assert render(load()) == render(kept())


def test_ids_are_the_same_in_another_interpreter() -> None:
    # No per-process salt (hash randomisation) may leak into an id.
    code = (
        "from sbdlq.fingerprint import fingerprint; "
        "print(fingerprint('OrderNotFound', 'Order 1 not found in store eu-west-1').id)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    here = fingerprint("OrderNotFound", "Order 48213 not found in store us-east-2").id
    assert out == here == PINNED["order-not-found"]


@pytest.mark.parametrize(
    ("text", "template"),
    [
        ("Order 48213 not found in store eu-west-1", "Order <num> not found in store <id>"),
        (
            "Timeout after 30000ms calling https://pay.example.com/v2/charge/ch_8f7a91c2?x=1",
            "Timeout after <duration> calling https://pay.example.com/<*>/charge/<*>?<*>",
        ),
        ("key (4F1C2E8A-1234-4ABC-9DEF-0123456789AB) exists", "key (<guid>) exists"),
        ("mail to jane.doe+x@example.org bounced", "mail to <email> bounced"),
        ("connect ECONNREFUSED 10.0.3.17:5432", "connect ECONNREFUSED <ip>"),
        ("connect ETIMEDOUT [2001:db8::1]:443", "connect ETIMEDOUT <ip>"),
        ("at 2024-05-01T12:34:56.789Z and 5/1/2024 1:02:03 PM", "at <ts> and <ts>"),
        ("waited 00:00:30, deadline PT30S", "waited <ts>, deadline <duration>"),
        ("HRESULT 0x80131904, amount -12.50 of 1,000.00", "HRESULT <hex>, amount <num> of <num>"),
        ("item c-42 in batch ORD-2024-000123", "item <id> in batch <id>"),
        # a name from code stays (a field, a constraint); data in quotes goes
        ("KeyError: 'customer_id'", "KeyError: 'customer_id'"),
        ("constraint 'PK_Orders' on 'dbo.Orders'", "constraint 'PK_Orders' on 'dbo.Orders'"),
        ('customer "Jane Doe" doesn\'t exist', 'customer "<str>" doesn\'t exist'),
        ("  many\n\tspaces  ", "many spaces"),
    ],
)
def test_masks(text: str, template: str) -> None:
    assert mask(text) == template


def test_words_make_groups_and_masked_parts_do_not() -> None:
    one = fingerprint("OrderNotFound", "Order 1 not found in store eu-west-1")
    assert fingerprint("OrderNotFound", "Order 99999 not found in store ap-south-2").id == one.id
    assert fingerprint("OrderNotFound", "Customer 1 not found in store eu-west-1").id != one.id
    assert fingerprint("MaxDeliveryCountExceeded", "Order 1 not found in store eu-west-1").id != one.id
    # a queue id in hex that happens to be all digits is still the same part
    assert fingerprint(None, "queued as 1A2B3C4D5E").id == fingerprint(None, "queued as 1234567890").id


def test_a_message_without_reason_or_description() -> None:
    fp = fingerprint(None, None)
    assert (fp.reason, fp.template) == ("(none)", "(none)")
    assert fp.id == fingerprint("", "").id != fingerprint("x", None).id


@pytest.mark.parametrize("text", ["3fa", "3fa2c1d0e", "xyz1", "", "3fa2 c1"])
def test_a_bad_fingerprint_id_is_refused(text: str) -> None:
    with pytest.raises(BadInput, match="invalid --fingerprint"):
        parse_fingerprint_id(text)


def test_an_id_or_a_prefix_is_taken_in_either_case() -> None:
    assert parse_fingerprint_id(" 3FA2C1D0 ") == "3fa2c1d0"
    assert parse_fingerprint_id("3fa2") == "3fa2"
