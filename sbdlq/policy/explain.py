"""`sbdlq apply --explain`: each rule of a policy in words, to read in a review (its action's words are
the action's own: `PolicyAction.explain`). Reads no broker."""

from __future__ import annotations

from typing import Any

from sbdlq.policy.schema import SELECTION_KEYS, Policy, Rule

#: How a selection key reads in a sentence (others: `key = value`).
_SELECTION_WORDS = {
    "reason": "whose dead-letter reason is {}",
    "description_contains": "whose description contains {}",
    "fingerprint": "whose fingerprint is {}",
    "subject": "whose subject is {}",
    "property": "with property {}",
    "enqueued_before": "enqueued before {}",
    "enqueued_after": "enqueued after {}",
    "sequence": "with sequence numbers {}",
    "body_contains": "whose body contains {}",
    "body_regex": "whose body matches {}",
    "where": "where {}",
}


def explain(policy: Policy) -> str:
    """The whole policy in words, one paragraph per rule."""
    paragraphs = [explain_rule(n, rule) for n, rule in enumerate(policy.rules, 1)]
    return "\n\n".join(paragraphs) + "\n"


def explain_rule(n: int, rule: Rule) -> str:
    lines = [f"Rule {n}, {rule.name!r} (line {rule.position.split(':')[0]}):"]
    lines.append(f"  on the dead-letter queue of {_entities(rule.entities)},")
    lines.append(f"  take {_selection(rule)}")
    lines.extend(f"  {line}" for line in rule.handler.explain(rule))
    if rule.stop_on_error:
        lines.append("  If it fails, the rules after it do not run.")
    return "\n".join(lines)


def _entities(patterns: tuple[str, ...]) -> str:
    words = []
    for p in patterns:
        if p == "*":
            words.append("every queue and subscription")
        elif any(ch in p for ch in "*?["):
            words.append(f"every queue or subscription matching {p}")
        else:
            words.append(p)
    return _join(words)


def _selection(rule: Rule) -> str:
    keys = {field: key for key, (field, _) in SELECTION_KEYS.items()}
    parts = [_SELECTION_WORDS.get(keys[f], keys[f] + " = {}").format(value_words(v)) for f, v in rule.selection.items()]
    if rule.older_than:
        parts.append(f"enqueued more than {rule.older_than} before the run")
    if not parts:
        return "every message,"
    return "the messages " + _join(parts) + ","


def value_words(value: Any) -> str:
    """A key's value as the sentences quote it: `'a' or 'b'` for a list."""
    if isinstance(value, list):
        return " or ".join(repr(v) for v in value)
    return repr(value)


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
