"""Config.json loader: Microsoft's Service Bus emulator format, read into the local engine.

The file is JSON with `//` and `/* */` comments (not inside strings) and trailing commas
tolerated. Everything is validated before the store is touched; the first problem is one
BadInput line naming the file and the field path, e.g.
`Config.json: UserConfig.Namespaces[0].Queues[2].Properties.LockDuration: invalid duration 'PT1X'`.

Differences from the official emulator (our extensions):
- any valid namespace name (the official one only takes `sbemulatorns`); one namespace per file;
- no limits on durations, delivery counts or entity numbers beyond the broker's own rules;
- `DeadLetteringOnFilterEvaluationExceptions` (subscriptions, default true): a rule that
  throws dead-letters the message instead of dropping it;
- `Status` (`Active` | `Disabled`, any entity): a disabled entity refuses sends and forwards;
- `MaxSizeInMessages` (queues): a full queue refuses sends, and forwards into it land in the
  source's transfer DLQ;
- `Subject` is accepted in a CorrelationFilter as another name for `Label`;
- `MaxMessageSizeInKilobytes` (1 to 102400; default 256, Standard's limit) on the namespace (the
  default of its queues and topics) or on a queue or topic (a subscription takes its topic's).
Omitted properties take the broker's defaults (MaxDeliveryCount 10, LockDuration PT1M,
messages never expire), as `create_queue` does. A subscription without rules receives
every message (the `$Default` rule).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from sbdlq.addresses import EntityPath, parse_address
from sbdlq.emulator.engine import Engine, Rule
from sbdlq.emulator.engine.vocabulary import MAX_MESSAGE_KB
from sbdlq.emulator.entity_properties import ALLOWED, PROPERTIES
from sbdlq.errors import BadInput
from sbdlq.models import EntityInfo
from sbdlq.named_files import read_named_file
from sbdlq.timeparse import parse_duration

# JSON key → (engine keyword, value kind), and which keys each entity kind takes: shared with
# the HTTP port's entity writes.
_PROPERTIES = PROPERTIES
_ALLOWED = ALLOWED
_CORRELATION_KEYS = (
    "ContentType",
    "CorrelationId",
    "Label",
    "Subject",
    "MessageId",
    "ReplyTo",
    "ReplyToSessionId",
    "SessionId",
    "To",
    "Properties",
)


@dataclass(frozen=True, slots=True)
class EntitySpec:
    """One queue, topic or subscription of the file, as engine keyword arguments."""

    kind: str  # queue | topic | subscription
    path: str  # `orders` or `topic/Subscriptions/sub`
    where: str  # the field path of its Name, for messages
    props: dict[str, Any] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)  # subscriptions only


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """A validated Config.json: one namespace and its entities."""

    source: str
    namespace: str
    queues: list[EntitySpec] = field(default_factory=list)
    topics: list[EntitySpec] = field(default_factory=list)
    subscriptions: list[EntitySpec] = field(default_factory=list)

    @property
    def rule_count(self) -> int:
        return sum(len(s.rules) for s in self.subscriptions)


@dataclass(frozen=True, slots=True)
class Applied:
    """What apply_config did to one entity."""

    kind: str
    path: str
    created: bool
    rules: int = 0


def load_config(path: str | os.PathLike[str]) -> EmulatorConfig:
    """Read and validate a Config.json file; BadInput naming the file otherwise."""
    source = os.fspath(path)
    raw = read_named_file(source, source, directory="is a directory, not a Config.json file")
    try:
        text = raw.decode("utf-8-sig")  # editors on Windows write a BOM
    except UnicodeDecodeError as exc:
        raise BadInput(f"{source}: not UTF-8 text (byte {exc.start})")
    return parse_config(text, source=source)


def parse_config(text: str, *, source: str = "Config.json") -> EmulatorConfig:
    """Validate Config.json text (JSONC); `source` names it in errors."""
    try:
        data = json.loads(strip_jsonc(text, source=source))
    except json.JSONDecodeError as exc:
        raise BadInput(f"{source}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}")
    return _Checker(source).config(data)


def strip_jsonc(text: str, *, source: str = "Config.json") -> str:
    """Blank out comments and trailing commas outside strings, keeping every line and column."""
    out = list(text)
    n = len(text)
    i = 0
    in_string = False
    pending_comma: int | None = None  # a comma not yet followed by a value

    def blank(start: int, end: int) -> None:
        for k in range(start, end):
            if out[k] not in "\r\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if in_string:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
            continue
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end == -1 else end
            blank(i, end)
            i = end
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                line = text.count("\n", 0, i) + 1
                col = i - (text.rfind("\n", 0, i) + 1) + 1
                raise BadInput(f"{source}:{line}:{col}: invalid JSON: unterminated /* comment")
            blank(i, end + 2)
            i = end + 2
            continue
        if c == '"':
            in_string = True
            pending_comma = None
        elif c == ",":
            pending_comma = i
        elif c in "}]":
            if pending_comma is not None:
                out[pending_comma] = " "
            pending_comma = None
        elif not c.isspace():
            pending_comma = None
        i += 1
    return "".join(out)


def apply_config(engine: Engine, cfg: EmulatorConfig) -> list[Applied]:
    """Create or update every entity of cfg (rules replaced, messages kept), all or nothing."""
    done: list[Applied] = []
    # One transaction: a failure halfway leaves the store as it was.
    with engine.store.write():
        existing = {e.path.casefold(): e for e in engine.list_entities()}
        check_against(cfg, existing.values())
        for spec in cfg.queues:
            engine.create_queue(spec.path, exist_ok=True, **spec.props)
            done.append(Applied("queue", spec.path, spec.path.casefold() not in existing))
        for spec in cfg.topics:
            engine.create_topic(spec.path, exist_ok=True, **spec.props)
            done.append(Applied("topic", spec.path, spec.path.casefold() not in existing))
        for spec in cfg.subscriptions:
            entity = parse_address(spec.path).entity
            assert entity.subscription is not None
            engine.create_subscription(
                entity.name, entity.subscription, rules=list(spec.rules), exist_ok=True, **spec.props
            )
            done.append(Applied("subscription", spec.path, spec.path.casefold() not in existing, len(spec.rules)))
    return done


def check_against(cfg: EmulatorConfig, entities: Iterable[EntityInfo]) -> None:
    """Kinds must match what the store holds; forwarding must name a queue or topic of the file or store."""
    existing = {e.path.casefold(): e for e in entities}
    specs = [*cfg.queues, *cfg.topics, *cfg.subscriptions]
    for spec in specs:
        held = existing.get(spec.path.casefold())
        if held is not None and held.kind != spec.kind:
            raise BadInput(f"{cfg.source}: {spec.where}: {spec.path!r} already exists in the store as a {held.kind}")
    known = {s.path.casefold(): s.kind for s in specs}
    for spec in specs:
        for key, prop in (("ForwardTo", "forward_to"), ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_to")):
            dest = spec.props.get(prop)
            if not dest:
                continue
            kind = known.get(dest.casefold()) or getattr(existing.get(dest.casefold()), "kind", None)
            where = spec.where.removesuffix(".Name") + f".Properties.{key}"
            if kind is None:
                raise BadInput(f"{cfg.source}: {where}: {dest!r} is not a queue or topic in the file or the store")
            if kind == "subscription":
                raise BadInput(f"{cfg.source}: {where}: cannot forward to subscription {dest!r}; name its topic")


class _Checker:
    """Walks the parsed JSON, converting as it goes; the first problem raises BadInput."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.default_kb: int | None = None  # the namespace's MaxMessageSizeInKilobytes

    def fail(self, where: str, problem: str) -> NoReturn:
        raise BadInput(f"{self.source}: {where}: {problem}" if where else f"{self.source}: {problem}")

    # ---------------------------------------------------------------- structure

    def config(self, data: Any) -> EmulatorConfig:
        root = self.obj(data, "", required=("UserConfig",), allowed=("UserConfig", "$schema"))
        user = self.obj(root["UserConfig"], "UserConfig", required=("Namespaces",), allowed=("Namespaces", "Logging"))
        namespaces = self.arr(user["Namespaces"], "UserConfig.Namespaces")
        if len(namespaces) != 1:
            self.fail("UserConfig.Namespaces", f"expected exactly one namespace, got {len(namespaces)}")
        where = "UserConfig.Namespaces[0]"
        allowed = ("Name", "Queues", "Topics", "MaxMessageSizeInKilobytes")
        ns = self.obj(namespaces[0], where, required=("Name",), allowed=allowed)
        name = self.name(ns["Name"], f"{where}.Name", "namespace")
        cfg = EmulatorConfig(source=self.source, namespace=name)
        if "MaxMessageSizeInKilobytes" in ns:
            # The namespace's limit is the default of its queues and topics.
            self.default_kb = self.message_kb(ns["MaxMessageSizeInKilobytes"], f"{where}.MaxMessageSizeInKilobytes")
        seen: dict[str, str] = {}
        for i, item in enumerate(self.arr(ns.get("Queues", []), f"{where}.Queues")):
            cfg.queues.append(self.entity(item, f"{where}.Queues[{i}]", "queue", seen))
        for i, item in enumerate(self.arr(ns.get("Topics", []), f"{where}.Topics")):
            topic_where = f"{where}.Topics[{i}]"
            topic_keys = ("Name", "Properties", "Subscriptions")
            topic = self.entity(item, topic_where, "topic", seen, allowed=topic_keys)
            cfg.topics.append(topic)
            subs_seen: dict[str, str] = {}
            for j, sub in enumerate(self.arr(item.get("Subscriptions", []), f"{topic_where}.Subscriptions")):
                cfg.subscriptions.append(
                    self.subscription(sub, f"{topic_where}.Subscriptions[{j}]", topic.path, subs_seen)
                )
        return cfg

    def entity(
        self,
        item: Any,
        where: str,
        kind: str,
        seen: dict[str, str],
        *,
        allowed: tuple[str, ...] = ("Name", "Properties"),
    ) -> EntitySpec:
        obj = self.obj(item, where, required=("Name",), allowed=allowed)
        name = self.name(obj["Name"], f"{where}.Name", kind)
        self.unique(name, f"{where}.Name", seen)
        props = self.properties(obj.get("Properties", {}), f"{where}.Properties", kind, name)
        if self.default_kb is not None:
            props.setdefault("max_message_size_kb", self.default_kb)
        return EntitySpec(kind, name, f"{where}.Name", props)

    def subscription(self, item: Any, where: str, topic: str, seen: dict[str, str]) -> EntitySpec:
        obj = self.obj(item, where, required=("Name",), allowed=("Name", "Properties", "Rules"))
        name = self.name(obj["Name"], f"{where}.Name", "subscription")
        self.unique(name, f"{where}.Name", seen)
        path = str(EntityPath(topic, name))
        props = self.properties(obj.get("Properties", {}), f"{where}.Properties", "subscription", path)
        rules: list[Rule] = []
        rules_seen: dict[str, str] = {}
        for k, raw in enumerate(self.arr(obj.get("Rules", []), f"{where}.Rules")):
            rule = self.rule(raw, f"{where}.Rules[{k}]")
            self.unique(rule.name, f"{where}.Rules[{k}].Name", rules_seen)
            rules.append(rule)
        return EntitySpec("subscription", path, f"{where}.Name", props, rules or [Rule.true()])

    def rule(self, item: Any, where: str) -> Rule:
        from sbdlq.sqlfilter import compile_action, compile_filter

        obj = self.obj(item, where, required=("Name", "Properties"), allowed=("Name", "Properties"))
        name = self.name(obj["Name"], f"{where}.Name", "rule", max_len=50)
        pw = f"{where}.Properties"
        props = self.obj(
            obj["Properties"],
            pw,
            required=("FilterType",),
            allowed=("FilterType", "CorrelationFilter", "SqlFilter", "Action"),
        )
        ftype = self.string(props["FilterType"], f"{pw}.FilterType")
        action: str | None = None
        if "Action" in props:
            act = self.obj(props["Action"], f"{pw}.Action", required=("SqlExpression",), allowed=("SqlExpression",))
            action = self.string(act["SqlExpression"], f"{pw}.Action.SqlExpression")
            self.sql(compile_action, action, f"{pw}.Action.SqlExpression")
        if ftype.casefold() == "sql":
            if "CorrelationFilter" in props:
                self.fail(f"{pw}.CorrelationFilter", "does not go with FilterType Sql (use SqlFilter)")
            if "SqlFilter" not in props:
                self.fail(f"{pw}.SqlFilter", "missing (FilterType Sql needs SqlFilter.SqlExpression)")
            sql_obj = self.obj(props["SqlFilter"], f"{pw}.SqlFilter", required=("SqlExpression",))
            self.obj(sql_obj, f"{pw}.SqlFilter", allowed=("SqlExpression",))
            sql = self.string(sql_obj["SqlExpression"], f"{pw}.SqlFilter.SqlExpression")
            self.sql(compile_filter, sql, f"{pw}.SqlFilter.SqlExpression")
            return Rule(name=name, sql=sql, action=action)
        if ftype.casefold() == "correlation":
            if "SqlFilter" in props:
                self.fail(f"{pw}.SqlFilter", "does not go with FilterType Correlation (use CorrelationFilter)")
            if "CorrelationFilter" not in props:
                self.fail(f"{pw}.CorrelationFilter", "missing (FilterType Correlation needs CorrelationFilter)")
            return Rule(name=name, correlation=self.correlation(props["CorrelationFilter"], pw), action=action)
        self.fail(f"{pw}.FilterType", f"unknown filter type {ftype!r} (Correlation or Sql)")

    def correlation(self, value: Any, pw: str) -> dict[str, Any]:
        where = f"{pw}.CorrelationFilter"
        obj = self.obj(value, where, allowed=_CORRELATION_KEYS)
        if not obj:
            self.fail(where, "empty: name at least one property to match")
        out: dict[str, Any] = {}
        for key, v in obj.items():
            if key != "Properties":
                out[key] = self.string(v, f"{where}.{key}")
                continue
            app = self.obj(v, f"{where}.Properties")
            if not app:
                self.fail(f"{where}.Properties", "empty: name at least one application property")
            for pk, pv in app.items():
                if not isinstance(pv, (str, int, float, bool)):
                    self.fail(f"{where}.Properties.{pk}", f"expected a string, number or boolean, got {_describe(pv)}")
            out[key] = dict(app)
        return out

    def properties(self, value: Any, where: str, kind: str, path: str) -> dict[str, Any]:
        obj = self.obj(value, where)
        allowed = _ALLOWED[kind]
        out: dict[str, Any] = {}
        for key, v in obj.items():
            if key not in allowed:
                self.unknown(f"{where}.{key}", key, allowed, f"{kind} property")
            engine_key, vkind = _PROPERTIES[key]
            fw = f"{where}.{key}"
            if vkind == "bool":
                out[engine_key] = self.boolean(v, fw)
            elif vkind == "duration":
                out[engine_key] = self.duration(v, fw)
            elif vkind == "count":
                out[engine_key] = self.count(v, fw)
            elif vkind == "message_kb":
                out[engine_key] = self.message_kb(v, fw)
            elif vkind == "status":
                text = self.string(v, fw)
                status = {"active": "Active", "disabled": "Disabled"}.get(text.casefold())
                if status is None:
                    self.fail(fw, f"invalid status {text!r} (Active or Disabled)")
                out[engine_key] = status
            else:
                dest = self.string(v, fw)
                if dest:
                    self.name(dest, fw, "destination")
                    if dest.casefold() == path.casefold():
                        self.fail(fw, f"{path!r} cannot forward to itself")
                    out[engine_key] = dest
        return out

    # ---------------------------------------------------------------- values

    def obj(
        self,
        value: Any,
        where: str,
        *,
        required: tuple[str, ...] = (),
        allowed: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            top = "" if where else " with UserConfig at the top level"
            self.fail(where, f"expected an object{top}, got {_describe(value)}")
        for key in required:
            if key not in value:
                self.fail(f"{where}.{key}" if where else key, "missing")
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    self.unknown(f"{where}.{key}" if where else key, key, allowed, "key")
        return value

    def arr(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(where, f"expected an array, got {_describe(value)}")
        return value

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            self.fail(where, f"expected a string, got {_describe(value)}")
        return value

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            self.fail(where, f"expected true or false, got {_describe(value)}")
        return value

    def count(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected an integer, got {_describe(value)}")
        if value < 1:
            self.fail(where, f"must be at least 1, got {value}")
        return value

    def message_kb(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected an integer number of kilobytes, got {_describe(value)}")
        if not 1 <= value <= MAX_MESSAGE_KB:
            limits = "256 is Standard's, 102400 Premium's most"
            self.fail(where, f"must be between 1 and {MAX_MESSAGE_KB} KB ({limits}), got {value}")
        return value

    def duration(self, value: Any, where: str) -> float:
        text = self.string(value, where)
        try:
            if not text.strip().upper().startswith("P"):
                raise BadInput(text)
            seconds = parse_duration(text)
        except BadInput:
            self.fail(where, f"invalid duration {text!r} (ISO 8601, e.g. PT30S, PT5M, P14D)")
        if seconds <= 0:
            self.fail(where, f"duration must be positive, got {text!r}")
        return seconds

    def name(self, value: Any, where: str, what: str, *, max_len: int = 260) -> str:
        text = self.string(value, where)
        try:
            if what == "subscription":
                ok = parse_address(f"x/Subscriptions/{text}").entity.subscription == text
            elif what == "rule":
                # `$Default` is the broker's own rule name.
                ok = len(text) <= max_len and parse_address(text.removeprefix("$")).entity == EntityPath(
                    text.removeprefix("$")
                )
            else:
                ok = parse_address(text).entity == EntityPath(text) and text == text.strip()
        except BadInput:
            ok = False
        if not ok:
            self.fail(where, f"invalid {what} name {text!r} (letters, digits, '.', '-', '_', '/')")
        return text

    def unique(self, name: str, where: str, seen: dict[str, str]) -> None:
        first = seen.setdefault(name.casefold(), where)
        if first != where:
            self.fail(where, f"duplicate name {name!r} (also at {first})")

    def unknown(self, where: str, key: str, allowed: tuple[str, ...], what: str) -> NoReturn:
        close = [a for a in allowed if a.casefold() == key.casefold()]
        if close:
            self.fail(where, f"unknown {what}; did you mean {close[0]!r}?")
        self.fail(where, f"unknown {what} (known: {', '.join(allowed)})")

    def sql(self, compile_fn: Any, text: str, where: str) -> None:
        try:
            compile_fn(text)
        except BadInput as exc:
            self.fail(where, exc.message)


def _describe(value: Any) -> str:
    """A JSON value's type and a short rendering, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"number {json.dumps(value)}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:39] + "…"
        return f"string {json.dumps(shown, ensure_ascii=False)}"
    if isinstance(value, list):
        return "an array"
    return "an object"
