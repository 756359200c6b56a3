"""A policy file (YAML) into typed rules; every refusal one line `FILE:LINE:COLUMN: what` (exit 2).

The file is someone's hand-written YAML that cron runs unattended, so the loader refuses rather
than guesses: anything but a regular file under MAX_BYTES, aliases (`*name`: loops and alias
bombs), nesting past MAX_DEPTH, duplicate keys, unknown keys, wrong types, bad globs,
durations the commands would refuse, an action with another action's options, and more than
one action. Values are checked by the same code the commands use (selection, edits), at load
time, so nothing runs from a file that has a bad rule anywhere. The actions, their keys and
their own checks are read off the registry (`policy/actions/`).
"""

from __future__ import annotations

import fnmatch
import math
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from sbdlq.addresses import SubQueue, parse_address
from sbdlq.errors import BadInput
from sbdlq.policy import schema
from sbdlq.policy.actions import ACTIONS
from sbdlq.policy.actions.base import OptionRefused
from sbdlq.policy.schema import OLDER_THAN, RULE_KEYS, SELECTION_KEYS, TOP_KEYS, Key, Policy, Rule

#: The largest policy file read: a policy is a page of rules, not data.
MAX_BYTES = 1024 * 1024
#: The deepest nesting of lists and mappings (a policy needs 4).
MAX_DEPTH = 16


class PolicyError(BadInput):
    """A policy file that cannot run; the message starts with FILE:LINE:COLUMN."""


class _At(Exception):
    """A refusal at a node; turned into a PolicyError with the file's name."""

    def __init__(self, node: Any, text: str) -> None:
        super().__init__(text)
        self.mark = node if isinstance(node, yaml.Mark) else node.start_mark
        self.text = text


def load_policy(path: str) -> Policy:
    """The policy in `path`, checked; PolicyError (exit 2) naming the line and column otherwise."""
    text = _read(path)
    try:
        root = _compose(text)
        # Relative `export:` folders are beside the file itself, not beside a symlink to it.
        rules = _policy(root, Path(os.path.realpath(path)).parent)
    except _At as at:
        raise PolicyError(f"{path}:{at.mark.line + 1}:{at.mark.column + 1}: {at.text}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise PolicyError(f"{path}:{line}:{col}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}:1:1: not valid YAML: {exc}") from None
    return Policy(path=path, rules=tuple(rules))


def _read(path: str) -> str:
    """The file's text: a regular file of at most MAX_BYTES of UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise PolicyError(f"{path}:1:1: cannot read the policy: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PolicyError(f"{path}:1:1: not a regular file")
        if st.st_size > MAX_BYTES:
            raise PolicyError(f"{path}:1:1: {st.st_size} bytes; a policy file is at most {MAX_BYTES} bytes (1 MB)")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise PolicyError(f"{path}:1:1: more than {MAX_BYTES} bytes; a policy file is at most 1 MB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise PolicyError(f"{path}:{line}:{col}: not UTF-8 text") from None


def _compose(text: str) -> yaml.Node:
    """The document's node tree, after a pass over its events that refuses aliases and deep nesting."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise _At(event.start_mark, f"alias *{event.anchor}: anchors and aliases are not allowed in a policy")
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _At(event.start_mark, f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    if len(nodes) != 1 or nodes[0] is None:
        where = nodes[1] if len(nodes) > 1 and nodes[1] is not None else yaml.Mark("", 0, 0, 0, "", 0)
        raise _At(where, "one YAML document with a `rules` list expected")
    return nodes[0]


_CONSTRUCTOR = yaml.SafeLoader("")


def _value(node: yaml.Node) -> Any:
    """A scalar node's value as YAML types it (`3` → 3, `true` → True)."""
    try:
        return _CONSTRUCTOR.construct_object(node, deep=True)
    finally:
        _CONSTRUCTOR.constructed_objects.clear()  # keep no node of a file alive after it is read


def _items(node: yaml.Node, what: str) -> Iterator[tuple[str, yaml.Node, yaml.Node]]:
    """(key, key node, value node) of a mapping; refuses non-text keys and duplicates."""
    if not isinstance(node, yaml.MappingNode):
        raise _At(node, f"{what}: a mapping expected")
    seen: set[str] = set()
    for key_node, value_node in node.value:
        key = _value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str):
            raise _At(key_node, f"{what}: keys are names")
        if key in seen:
            raise _At(key_node, f"{what}: {key} given twice")
        seen.add(key)
        yield key, key_node, value_node


def _policy(root: yaml.Node, base: Path) -> list[Rule]:
    top = dict((k, (kn, vn)) for k, kn, vn in _items(root, "the policy"))
    for key, (kn, _) in top.items():
        if key not in TOP_KEYS:
            hint = _nearest(key, TOP_KEYS) or f" (expected {', '.join(TOP_KEYS)})"
            raise _At(kn, f"unknown key {key!r} at the top{hint}")
    if "rules" not in top:
        raise _At(root, "no `rules` list")
    stop = (
        check_value("stop_on_error", TOP_KEYS["stop_on_error"], top["stop_on_error"][1])
        if "stop_on_error" in top
        else False
    )
    rules_node = top["rules"][1]
    if not isinstance(rules_node, yaml.SequenceNode) or not rules_node.value:
        raise _At(rules_node, "rules: a list of at least one rule expected")
    rules: list[Rule] = []
    names: set[str] = set()
    for node in rules_node.value:
        rule = _rule(node, base, default_stop=bool(stop))
        if rule.name in names:
            raise _At(node, f"rule {rule.name!r}: another rule has this name")
        names.add(rule.name)
        rules.append(rule)
    return rules


def _rule(node: yaml.Node, base: Path, *, default_stop: bool) -> Rule:
    """One rule: its own keys, its selection, exactly one action."""
    given: dict[str, Any] = {}
    selection: dict[str, Any] = {}
    action: tuple[str, yaml.Node, yaml.Node] | None = None
    for key, kn, vn in _items(node, "a rule"):
        if key in ACTIONS:
            if action is not None:
                raise _At(kn, f"a rule has one action: {action[0]} and {key} both given")
            action = (key, kn, vn)
        elif key in RULE_KEYS:
            given[key] = check_value(key, RULE_KEYS[key], vn)
            if key == "name" and not given[key].strip():
                raise _At(vn, "name: an empty name")
        elif key in SELECTION_KEYS:
            field_name, spec = SELECTION_KEYS[key]
            selection[field_name] = check_value(key, spec, vn)
            _check_selection({field_name: selection[field_name]}, None, vn)
        elif key == OLDER_THAN:
            given[OLDER_THAN] = check_value(key, Key(schema.DURATION), vn)
        else:
            raise _At(kn, f"unknown key {key!r} in a rule{_near(key)}")
    for key, spec in RULE_KEYS.items():
        if spec.required and key not in given:
            raise _At(node, f"a rule needs `{key}`")
    if action is None:
        raise _At(node, f"rule {given['name']!r}: no action (give one of {', '.join(ACTIONS)})")
    name, options, edits = _action(*action)
    for key, spec in ACTIONS[name].keys.items():
        if spec.kind == schema.PATH and key in options:
            # Relative to the policy file, not to wherever cron happens to start (its HOME).
            options[key] = str(base / Path(options[key]).expanduser())
    position = f"{node.start_mark.line + 1}:{node.start_mark.column + 1}"
    _check_selection(selection, given.get(OLDER_THAN), node)
    return Rule(
        name=given["name"],
        entities=tuple(given["entities"]),
        action=name,
        options=options,
        selection=selection,
        older_than=given.get(OLDER_THAN),
        edits=edits,
        stop_on_error=given.get("stop_on_error", default_stop),
        position=position,
    )


def _near(key: str) -> str:
    """A hint naming the action a misplaced option belongs to, or the nearest key."""
    owners = [name for name, action in ACTIONS.items() if key in action.keys]
    if owners:
        return f" (an option of {' and '.join(owners)}: put it under the action)"
    return _nearest(key, [*RULE_KEYS, *SELECTION_KEYS, OLDER_THAN, *ACTIONS])


def _nearest(key: str, known: Iterable[str]) -> str:
    """ " (did you mean 'KEY'?)" naming the known key nearest to a misspelt one, else ""; every
    level of the file (the top, a rule, an action's options) suggests through this one."""
    from sbdlq.nearest import closest

    near = closest(key, known, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _action(name: str, key_node: yaml.Node, node: yaml.Node) -> tuple[str, dict[str, Any], Any]:
    """The action's options, checked against its own keys (another action's are refused by name),
    then by the action itself (`PolicyAction.check`: what its options mean together)."""
    action = ACTIONS[name]
    keys = action.keys
    options: dict[str, Any] = {}
    if isinstance(node, yaml.ScalarNode) and _value(node) is None:
        node = yaml.MappingNode("tag:yaml.org,2002:map", [], node.start_mark, node.end_mark)
    for key, kn, vn in _items(node, name):
        if key not in keys:
            owners = [other for other, o in ACTIONS.items() if key in o.keys]
            what = (
                f"{key!r} is an option of {' and '.join(owners)}, not of {name}"
                if owners
                else f"unknown key {key!r} in {name}{_nearest(key, keys)}"
            )
            raise _At(kn, what)
        options[key] = check_value(key, keys[key], vn)
    for key, spec in keys.items():
        if spec.required and key not in options:
            raise _At(node, f"{name} needs `{key}`")
    try:
        edits = action.check(options)
    except OptionRefused as exc:
        raise _At(node, exc.text) from None
    return name, options, edits


def _check_selection(selection: dict[str, Any], older_than: str | None, node: yaml.Node) -> None:
    """Compile the selection now (as the commands would): a bad value stops the whole file."""
    from sbdlq.selection import build_selection

    try:
        build_selection(**selection, older_than=older_than)
    except BadInput as exc:
        raise _At(node, exc.line()) from None


def check_value(key: str, spec: Key, node: yaml.Node) -> Any:
    """The value of `key` if it is of the key's kind (and within its bounds), else a refusal at it."""
    kind = spec.kind
    if kind in (schema.STRINGS, schema.GLOBS):
        items = node.value if isinstance(node, yaml.SequenceNode) else [node] if kind == schema.STRINGS else None
        if items is None or not items:
            raise _At(node, f"{key}: {kind} expected")
        values = [_scalar(key, n, str) for n in items]
        if kind == schema.GLOBS:
            for n, v in zip(items, values, strict=True):
                check_glob(key, v, n)
        return values
    if kind == schema.PAIRS:
        return _pairs(key, node)
    if kind == schema.BOOL:
        return _scalar(key, node, bool)
    if kind in (schema.INT, schema.NUMBER):
        value = _scalar(key, node, int if kind == schema.INT else (int, float))
        if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
            raise _At(node, f"{key}: a {kind} expected")
        if spec.minimum is not None and value < spec.minimum:
            raise _At(node, f"{key}: at least {spec.minimum:g}")
        if spec.above_zero and value <= 0:
            raise _At(node, f"{key}: more than 0")
        return value
    value = _scalar(key, node, str)
    if kind == schema.CHOICE and value not in spec.choices:
        raise _At(node, f"{key}: one of {', '.join(spec.choices)}, not {value!r}")
    if kind == schema.DURATION:
        from sbdlq.timeparse import parse_duration

        try:
            parse_duration(value, what=key)
        except BadInput as exc:
            raise _At(node, exc.line()) from None
    if kind == schema.PATH and not value.strip():
        raise _At(node, f"{key}: a directory expected")
    return value


_KINDS = {str: "text", bool: "true or false", int: "a whole number"}


def _scalar(key: str, node: yaml.Node, want: Any) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        shape = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
        raise _At(node, f"{key}: {_KINDS.get(want, 'a number')} expected, not a {shape}")
    value = _value(node)
    if want is str and value is not None and not isinstance(value, str) and node.style is None:
        value = node.value  # `reason: 404`, `enqueued_before: 2026-01-31`, `older_than: 3600`: the text as written
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        raise _At(node, f"{key}: {_KINDS.get(want, 'a number')} expected, not {node.value!r}")
    if isinstance(value, str) and "\x00" in value:
        raise _At(node, f"{key}: a NUL character is not allowed")
    return value


def _pairs(key: str, node: yaml.Node) -> list[str]:
    """`K=V` texts, from a list of them or a mapping (values written as on the command line)."""
    if isinstance(node, yaml.MappingNode):
        out = []
        for k, _, vn in _items(node, key):
            v = _scalar(f"{key}.{k}", vn, (str, int, float, bool))
            out.append(f"{k}={'true' if v is True else 'false' if v is False else v}")
        return out
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    values = [_scalar(key, n, str) for n in items]
    for n, v in zip(items, values, strict=True):
        if "=" not in v or not v.partition("=")[0].strip():
            raise _At(n, f"{key}: K=V expected, not {v!r}")
    return values


def check_glob(key: str, pattern: str, node: yaml.Node) -> None:
    """An entity name or glob: `*`, `?` and `[...]` over queue and `TOPIC/Subscriptions/SUB` paths."""
    if not pattern.strip():
        raise _At(node, f"{key}: an empty entity name")
    i = 0
    skeleton = []
    while i < len(pattern):
        ch = pattern[i]
        if ch == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                raise _At(node, f"{key}: bad glob {pattern!r}: '[' is not closed")
            skeleton.append("x")
            i = end + 1
            continue
        skeleton.append("x" if ch in "*?" else ch)
        i += 1
    if "]" in pattern.replace("[]", "") and "[" not in pattern:
        raise _At(node, f"{key}: bad glob {pattern!r}: ']' without '['")
    try:
        address = parse_address("".join(skeleton))
    except BadInput as exc:
        raise _At(node, f"{key}: bad entity {pattern!r}: {exc.message}") from None
    if address.sub_queue is not SubQueue.NONE:
        raise _At(node, f"{key}: {pattern!r} names a sub-queue; name the queue or subscription (rules act on its DLQ)")
    fnmatch.translate(pattern)  # the matcher used at run time accepts it
