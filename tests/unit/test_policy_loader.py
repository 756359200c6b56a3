"""The policy loader: the shape of a good file, and a line with LINE:COLUMN for every bad one."""

from __future__ import annotations

from pathlib import Path

import pytest
from policy_cases import BAD_POLICIES, Bad, write_bad

from sbdlq.policy.loader import MAX_BYTES, PolicyError, load_policy
from sbdlq.policy.schema import SELECTION_KEYS

GOOD = """\
stop_on_error: false
rules:
  - name: retry timeouts
    entities: [orders, "billing/Subscriptions/*"]
    reason: TimeoutException
    older_than: 1h
    resubmit: {max_attempts: 3, then: keep, set_property: {tenant: eu}}
  - name: drop expired after a week
    entities: ["*"]
    reason: [TTLExpiredException]
    older_than: 7d
    purge: {export: /var/lib/sbdlq/exports}
  - name: page when payments pile up
    entities: [payments]
    alert: {above: 1000}
"""


def test_a_good_policy_loads_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    policy = load_policy(str(path))
    assert [r.name for r in policy.rules] == [
        "retry timeouts",
        "drop expired after a week",
        "page when payments pile up",
    ]
    retry, drop, alert = policy.rules
    assert retry.entities == ("orders", "billing/Subscriptions/*")
    assert (retry.action, retry.option("max_attempts"), retry.option("then")) == ("resubmit", 3, "keep")
    assert retry.selection == {"reasons": ["TimeoutException"]} and retry.older_than == "1h"
    assert dict(retry.edits.set_properties) == {"tenant": "eu"}
    assert (drop.action, drop.option("export"), drop.deletes) == ("purge", "/var/lib/sbdlq/exports", True)
    assert (alert.action, alert.option("above"), alert.deletes) == ("alert", 1000, False)
    assert policy.deletes


def test_the_selection_keys_are_the_commands_selection_options() -> None:
    # Read off cli/options.SelectionOptions: one owner of the list.
    assert set(SELECTION_KEYS) == {
        "reason",
        "param",
        "description_contains",
        "fingerprint",
        "subject",
        "property",
        "enqueued_before",
        "enqueued_after",
        "sequence",
        "body_contains",
        "body_regex",
        "where",
    }


def test_the_table_has_at_least_twenty_cases() -> None:
    assert len(BAD_POLICIES) >= 20
    assert len({c.id for c in BAD_POLICIES}) == len(BAD_POLICIES)


@pytest.mark.parametrize("case", BAD_POLICIES, ids=[c.id for c in BAD_POLICIES])
def test_a_bad_policy_is_one_line_with_its_line_and_column(tmp_path: Path, case: Bad) -> None:
    path = write_bad(tmp_path, case)
    with pytest.raises(PolicyError) as caught:
        load_policy(str(path))
    line = caught.value.line()
    assert "\n" not in line
    assert line.startswith(f"{path}:{case.at}: "), line
    assert case.says in line, line
    assert MAX_BYTES == 1024 * 1024


def test_the_readme_policy_loads(tmp_path: Path) -> None:
    import re

    from support.readme import section

    text = section("# Policies: `sbdlq apply`")
    (block,) = re.findall(r"```yaml\n([\s\S]*?)```", text)
    path = tmp_path / "policy.yaml"
    path.write_text(block)
    policy = load_policy(str(path))
    assert [r.action for r in policy.rules] == ["resubmit", "purge", "resubmit", "alert"]
    assert dict(policy.rules[2].edits.set_properties) == {"retried-by": "policy"}


def test_plain_scalars_that_yaml_types_are_taken_as_written_where_text_is_expected(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n"
        "  - {name: 2026, entities: [q], reason: 404, enqueued_before: 2026-01-31, older_than: 3600, purge: {}}\n"
    )
    (rule,) = load_policy(str(path)).rules
    assert rule.name == "2026" and rule.older_than == "3600"
    assert rule.selection == {"reasons": ["404"], "enqueued_before": "2026-01-31"}
