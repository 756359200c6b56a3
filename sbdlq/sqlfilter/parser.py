"""Pratt parser: filter text to a predicate tree, action text to a list of statements."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from sbdlq.sqlfilter import nodes as n
from sbdlq.sqlfilter.errors import SqlFilterSyntaxError
from sbdlq.sqlfilter.lexer import EOF, IDENT, KEYWORD, NUMBER, OP, PARAM, QIDENT, STRING, Token, tokenize
from sbdlq.sqlfilter.like import like_matcher
from sbdlq.sqlfilter.sysprops import SETTABLE, canonical

# Quotas: "Maximum length of filter condition string: 1,024", the same for a rule action
# string, and "Maximum number of expressions per rule action: 32".
MAX_LENGTH = 1024
MAX_STATEMENTS = 32
# Nesting cap, far above real filters, so hostile input can't exhaust Python's stack.
MAX_DEPTH = 64

# Binding powers, loosest first. NOT binds looser than comparisons (`NOT a = 1` is
# `NOT (a = 1)`) and tighter than AND.
_OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY = 10, 20, 25, 30, 40, 50, 60

_COMPARISONS = {"=": "=", "<>": "<>", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_INFIX_OPS = {"+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL, "%": _MUL} | dict.fromkeys(_COMPARISONS, _CMP)
_INFIX_KEYWORDS = {"OR": _OR, "AND": _AND, "IN": _CMP, "LIKE": _CMP, "IS": _CMP}
_FUNCTIONS = {"newid": "newid", "property": "property", "p": "property"}


class _Parser:
    """One parse over the tokens of one text."""

    def __init__(self, text: str, what: str, parameters: Mapping[str, Any] | None = None) -> None:
        if len(text) > MAX_LENGTH:
            raise SqlFilterSyntaxError(f"{what} is {len(text)} characters long; the maximum is {MAX_LENGTH}")
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.parameters = check_parameters(parameters)

    def parameter(self, tok: Token) -> n.Const:
        """`@name` as the constant its value is (names compare without case, as property names)."""
        if tok.value in self.parameters:
            return n.Const(self.parameters[tok.value], tok.pos)
        folded = tok.value.casefold()
        for name, value in self.parameters.items():
            if name.casefold() == folded:
                return n.Const(value, tok.pos)
        raise SqlFilterSyntaxError(f"parameter {tok.value} has no value (give it in the parameters)", tok.pos)

    # --- token helpers ---------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != EOF:
            self.i += 1
        return tok

    def at(self, kind: str, value: object = None) -> bool:
        tok = self.tokens[self.i]
        return tok.kind == kind and (value is None or tok.value == value)

    def expect(self, kind: str, value: str) -> Token:
        if not self.at(kind, value):
            raise self.unexpected(self.peek(), f"expected {value!r}")
        return self.advance()

    def expect_end(self) -> None:
        if not self.at(EOF):
            raise self.unexpected(self.peek())

    @staticmethod
    def unexpected(tok: Token, hint: str | None = None) -> SqlFilterSyntaxError:
        message = f"unexpected {tok.describe()}"
        return SqlFilterSyntaxError(f"{message} ({hint})" if hint else message, tok.pos)

    # --- kind checks -----------------------------------------------------------------

    @staticmethod
    def predicate(node: n.Node) -> n.Node:
        if not n.is_predicate(node):
            raise SqlFilterSyntaxError("expected a condition, found a value", node.pos)
        return node

    @staticmethod
    def value(node: n.Node, op: Token) -> n.Node:
        if isinstance(node, n.PREDICATES):
            raise SqlFilterSyntaxError(f"{op.text!r} cannot be applied to a condition", op.pos)
        return node

    # --- expressions -----------------------------------------------------------------

    def expression(self, rbp: int) -> n.Node:
        """Everything that binds tighter than `rbp`."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SqlFilterSyntaxError(f"expression nested too deeply (limit {MAX_DEPTH})", self.peek().pos)
        try:
            left = self.prefix(self.advance())
            while True:
                tok = self.peek()
                lbp = self.infix_power(tok)
                if lbp <= rbp:
                    return left
                self.advance()
                left = self.infix(tok, lbp, left)
        finally:
            self.depth -= 1

    def infix_power(self, tok: Token) -> int:
        if tok.kind == OP:
            return _INFIX_OPS.get(tok.value, 0)
        if tok.kind == KEYWORD:
            if tok.value == "NOT":
                # Only `NOT IN` and `NOT LIKE` continue an expression.
                nxt = self.peek(1)
                return _CMP if nxt.kind == KEYWORD and nxt.value in ("IN", "LIKE") else 0
            return _INFIX_KEYWORDS.get(tok.value, 0)
        return 0

    def prefix(self, tok: Token) -> n.Node:
        if tok.kind in (NUMBER, STRING):
            return n.Const(tok.value, tok.pos)
        if tok.kind == PARAM:
            return self.parameter(tok)
        if tok.kind == KEYWORD:
            if tok.value in ("TRUE", "FALSE", "NULL"):
                return n.Const({"TRUE": True, "FALSE": False, "NULL": None}[tok.value], tok.pos)
            if tok.value == "NOT":
                return n.Not(self.predicate(self.expression(_NOT)), tok.pos)
            if tok.value == "EXISTS":
                self.expect(OP, "(")
                prop = self.property_ref()
                self.expect(OP, ")")
                return n.Exists(prop, tok.pos)
            raise self.unexpected(tok)
        if tok.kind in (IDENT, QIDENT):
            if tok.kind == IDENT and self.at(OP, "("):
                return self.call(tok)
            return self.property_rest(tok)
        if tok.kind == OP:
            if tok.value == "(":
                inner = self.expression(0)
                self.expect(OP, ")")
                return inner
            if tok.value in ("-", "+"):
                return self.unary(tok)
        raise self.unexpected(tok)

    def unary(self, tok: Token) -> n.Node:
        operand = self.value(self.expression(_UNARY), tok)
        # Fold signs into numeric constants so `x > -5` takes the constant fast path.
        if isinstance(operand, n.Const) and type(operand.value) in (int, float):
            return n.Const(-operand.value if tok.value == "-" else operand.value, tok.pos)
        return n.Unary(tok.value, operand, tok.pos)

    def infix(self, tok: Token, lbp: int, left: n.Node) -> n.Node:
        if tok.kind == KEYWORD and tok.value in ("AND", "OR"):
            return self.logical(tok, lbp, left)
        if tok.kind == KEYWORD:
            negated = tok.value == "NOT"
            keyword = self.advance() if negated else tok
            self.value(left, keyword)
            if keyword.value == "IN":
                return self.in_list(left, negated, tok)
            if keyword.value == "LIKE":
                return self.like(left, negated, tok)
            return self.is_null(left, tok)
        self.value(left, tok)
        right = self.value(self.expression(lbp), tok)
        if tok.value in _COMPARISONS:
            return n.Compare(_COMPARISONS[tok.value], left, right, tok.pos)
        # Left-associative chains become one node, so `a+b+c+...` adds no depth.
        if isinstance(left, n.Arith) and _INFIX_OPS[left.rest[0][0]] == lbp:
            return n.Arith(left.first, (*left.rest, (tok.value, right)), left.pos)
        return n.Arith(left, ((tok.value, right),), left.pos)

    def logical(self, tok: Token, lbp: int, left: n.Node) -> n.Node:
        self.predicate(left)
        right = self.predicate(self.expression(lbp))
        operands: list[n.Node] = []
        for side in (left, right):
            if isinstance(side, n.Logical) and side.op == tok.value:
                operands.extend(side.operands)  # AND and OR are associative: flatten
            else:
                operands.append(side)
        return n.Logical(tok.value, tuple(operands), left.pos)

    def in_list(self, left: n.Node, negated: bool, tok: Token) -> n.Node:
        self.expect(OP, "(")
        items = [self.item(tok)]
        while self.at(OP, ","):
            self.advance()
            items.append(self.item(tok))
        self.expect(OP, ")")
        return n.In(left, tuple(items), negated, tok.pos)

    def item(self, tok: Token) -> n.Node:
        return self.value(self.expression(0), tok)

    def like(self, left: n.Node, negated: bool, tok: Token) -> n.Node:
        pattern = self.value(self.expression(_CMP), tok)
        escape: n.Node | None = None
        if self.at(KEYWORD, "ESCAPE"):
            esc_tok = self.advance()
            escape = self.value(self.expression(_CMP), esc_tok)
            if isinstance(escape, n.Const) and escape.value is not None and not _one_char(escape.value):
                raise SqlFilterSyntaxError("the ESCAPE character must be a string of length 1", escape.pos)
        if isinstance(pattern, n.Const) and pattern.value is not None:
            if not isinstance(pattern.value, str):
                raise SqlFilterSyntaxError("a LIKE pattern must be a string", pattern.pos)
            if escape is None or (isinstance(escape, n.Const) and isinstance(escape.value, str)):
                try:
                    like_matcher(pattern.value, escape.value if escape is not None else None)
                except ValueError as exc:
                    raise SqlFilterSyntaxError(str(exc), pattern.pos)
        return n.Like(left, pattern, escape, negated, tok.pos)

    def is_null(self, left: n.Node, tok: Token) -> n.Node:
        negated = self.at(KEYWORD, "NOT")
        if negated:
            self.advance()
        self.expect(KEYWORD, "NULL")
        if not isinstance(left, n.Prop):
            # The grammar: <property> IS [NOT] NULL.
            raise SqlFilterSyntaxError("IS [NOT] NULL applies to a property", left.pos)
        return n.IsNull(left, negated, tok.pos)

    def call(self, tok: Token) -> n.Node:
        name = _FUNCTIONS.get(tok.value.lower())
        if name is None:
            raise SqlFilterSyntaxError(f"unknown function {tok.value!r}", tok.pos)
        open_tok = self.expect(OP, "(")
        args: tuple[n.Node, ...] = ()
        if name == "property":
            args = (self.value(self.expression(0), open_tok),)
        self.expect(OP, ")")
        return n.Func(name, args, tok.pos)

    # --- properties ------------------------------------------------------------------

    def property_ref(self) -> n.Prop:
        """A `[scope.]name` where the grammar wants a <property>."""
        tok = self.advance()
        if tok.kind not in (IDENT, QIDENT):
            raise self.unexpected(tok, "expected a property name")
        return self.property_rest(tok)

    def property_rest(self, tok: Token) -> n.Prop:
        """The property whose first identifier is `tok`."""
        if not self.at(OP, "."):
            return n.Prop(n.USER, tok.value, tok.pos)
        scope = tok.value.lower()
        if scope not in (n.SYS, n.USER):
            raise SqlFilterSyntaxError(
                f"unknown scope {tok.value!r} (use sys. or user., or [brackets] for a name with a dot)", tok.pos
            )
        self.advance()
        name_tok = self.advance()
        if name_tok.kind not in (IDENT, QIDENT):
            raise self.unexpected(name_tok, "expected a property name")
        if scope == n.USER:
            return n.Prop(n.USER, name_tok.value, tok.pos)
        name = canonical(name_tok.value)
        if name is None:
            # "An attempt to access a nonexistent system property is an error."
            raise SqlFilterSyntaxError(f"unknown system property 'sys.{name_tok.value}'", name_tok.pos)
        return n.Prop(n.SYS, name, tok.pos)

    # --- actions ---------------------------------------------------------------------

    def statement(self) -> n.Statement:
        tok = self.advance()
        verb = tok.value.upper() if tok.kind == IDENT else None
        if verb not in ("SET", "REMOVE"):
            raise self.unexpected(tok, "expected SET or REMOVE")
        prop = self.property_ref()
        if verb == "REMOVE":
            if prop.scope == n.SYS:
                raise SqlFilterSyntaxError(f"cannot REMOVE system property 'sys.{prop.name}'", prop.pos)
            return n.RemoveStmt(prop, tok.pos)
        if prop.scope == n.SYS and prop.name not in SETTABLE:
            raise SqlFilterSyntaxError(f"system property 'sys.{prop.name}' cannot be SET", prop.pos)
        eq = self.expect(OP, "=")
        return n.SetStmt(prop, self.value(self.expression(0), eq), tok.pos)


def _one_char(value: object) -> bool:
    return isinstance(value, str) and len(value) == 1


#: the Python types a parameter's value may have (the SDKs': string, whole and real numbers,
#: boolean, date-time, time span; and null)
PARAMETER_TYPES = (str, bool, int, float, datetime, timedelta, UUID, type(None))


def check_parameters(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters of a filter or action, checked: names begin with `@`, as Service Bus wants."""
    checked: dict[str, Any] = {}
    for name, value in (parameters or {}).items():
        if not isinstance(name, str) or not name.startswith("@") or len(name) < 2:
            raise SqlFilterSyntaxError(f"parameter name {name!r} must begin with @ (@name)")
        if not isinstance(value, PARAMETER_TYPES):
            raise SqlFilterSyntaxError(f"parameter {name} has a value of type {type(value).__name__}")
        checked[name] = value
    return checked


def parse_filter(text: str, parameters: Mapping[str, Any] | None = None) -> n.Node:
    """The predicate tree of a SQL filter, `@name`s replaced by their values; SqlFilterSyntaxError otherwise."""
    parser = _Parser(text, "filter expression", parameters)
    node = parser.expression(0)
    parser.expect_end()
    return parser.predicate(node)


def parse_action(text: str, parameters: Mapping[str, Any] | None = None) -> list[n.Statement]:
    """The statements of a SQL rule action (`SET ...; REMOVE ...`); SqlFilterSyntaxError otherwise."""
    parser = _Parser(text, "action expression", parameters)
    statements: list[n.Statement] = []
    while not parser.at(EOF):
        statements.append(parser.statement())
        if len(statements) > MAX_STATEMENTS:
            raise SqlFilterSyntaxError(f"more than {MAX_STATEMENTS} statements in one action", statements[-1].pos)
        # "Semicolon is optional" after each statement.
        if parser.at(OP, ";"):
            parser.advance()
    if not statements:
        raise SqlFilterSyntaxError("empty action expression", 1)
    return statements
