"""`sbdlq apply --explain`: each rule of a policy in words, to read in a review. Reads no broker."""

from __future__ import annotations

from typing import Any

from sbdlq.policy.schema import EDIT_KEYS, SELECTION_KEYS, THEN_PURGE, Policy, Rule

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
    lines.extend(f"  {line}" for line in _action(rule))
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
    parts = [_SELECTION_WORDS.get(keys[f], keys[f] + " = {}").format(_value(v)) for f, v in rule.selection.items()]
    if rule.older_than:
        parts.append(f"enqueued more than {rule.older_than} before the run")
    if not parts:
        return "every message,"
    return "the messages " + _join(parts) + ","


def _action(rule: Rule) -> list[str]:
    at_most = f" (at most {rule.option('max')} per run)" if rule.option("max") else ""
    if rule.action == "alert":
        return [f"count them, and make the run exit 3 when there are more than {rule.option('above')}. Nothing moves."]
    if rule.action == "purge":
        export = rule.option("export")
        if export:
            return [f"export each to a new file in {export}, then delete it{at_most}."]
        return [f"delete them{at_most}, without keeping a copy."]
    to = rule.option("to")
    out = [
        f"send a copy of each to {to if to else 'its queue (a subscription: its topic)'}, then remove it from "
        f"the DLQ{at_most}."
    ]
    if rule.option("spread"):
        out.append(f"The copies are scheduled evenly over {rule.option('spread')} from the run, not sent at once.")
    edits = [f"{key} {_value(rule.options[key])}" for key in EDIT_KEYS if key in rule.options]
    if edits:
        out.append("Each copy is edited: " + ", ".join(edits) + ".")
    limit = rule.option("max_attempts")
    if limit is not None:
        out.append(f"A message resubmitted {limit} time(s) already (sbdlq-attempt {limit}) is not sent again:")
        if rule.option("then") == THEN_PURGE:
            out.append(f"  it is exported to a new file in {rule.option('export')}, then deleted.")
        else:
            out.append("  it stays in the DLQ, counted as kept.")
    return out


def _value(value: Any) -> str:
    if isinstance(value, list):
        return " or ".join(repr(v) for v in value)
    return repr(value)


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
