"""The matrix router's set language, llama-swap's grammar and error messages (its
`internal/matrix/dsl.go` and `program.go`):

    expr := and ('|' and)*        OR: one of the alternatives may run
    and  := atom ('&' atom)*      AND: all of them may run together
    atom := ident | '+' set | '(' expr ')'

Identifiers are letters, digits, `_`, `-` and `.`; a var wins over a model id of the same name.
`+name` inlines another set. A set describes which models *may* run together (subset semantics):
choosing it starts only the requested model. Compiling resolves identifiers to model ids, checks
references and cycles, and orders the sets as llama-swap's solver visits them (each set after the
sets it references, otherwise in the order written).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import msgspec


class Leaf(msgspec.Struct, frozen=True, tag="model"):
    model: str


class Ref(msgspec.Struct, frozen=True, tag="ref"):
    set: str


class All(msgspec.Struct, frozen=True, tag="and"):
    items: tuple[Expr, ...]


class AnyOf(msgspec.Struct, frozen=True, tag="or"):
    items: tuple[Expr, ...]


Expr = Leaf | Ref | All | AnyOf


class MatrixSet(msgspec.Struct, frozen=True):
    name: str
    dsl: str
    expr: Expr


class DslError(ValueError):
    """A set that does not parse or does not link; the message is llama-swap's."""

    def __init__(self, message: str, set_name: str | None = None) -> None:
        super().__init__(message)
        self.set_name = set_name  # the set the error is about, for its line


def _ident_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_-."


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "&|()":
            tokens.append((ch, ch))
            i += 1
        elif ch == "+":
            start = i = i + 1
            while i < len(text) and _ident_char(text[i]):
                i += 1
            if i == start:
                raise DslError(f"tokenize: expected set name after '+' at position {start}")
            tokens.append(("ref", text[start:i]))
        elif _ident_char(ch):
            start = i
            while i < len(text) and _ident_char(text[i]):
                i += 1
            tokens.append(("ident", text[start:i]))
        else:
            raise DslError(f"tokenize: unexpected character {ch!r} at position {i}")
    tokens.append(("eof", ""))
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos]

    def next(self) -> tuple[str, str]:
        token = self.tokens[self.pos]
        if token[0] != "eof":
            self.pos += 1
        return token

    def expr(self) -> Expr:
        items = [self.conjunction()]
        while self.peek()[0] == "|":
            self.next()
            items.append(self.conjunction())
        return items[0] if len(items) == 1 else AnyOf(tuple(items))

    def conjunction(self) -> Expr:
        items = [self.atom()]
        while self.peek()[0] == "&":
            self.next()
            items.append(self.atom())
        return items[0] if len(items) == 1 else All(tuple(items))

    def atom(self) -> Expr:
        kind, value = self.next()
        if kind == "ident":
            return Leaf(value)
        if kind == "ref":
            return Ref(value)
        if kind == "(":
            inner = self.expr()
            if self.next()[0] != ")":
                raise DslError("parse: missing closing parenthesis")
            return inner
        raise DslError(f'parse: unexpected token "{value}"')


def parse(text: str) -> Expr:
    """One set's DSL as a tree of unresolved identifiers."""
    text = text.strip()
    if not text:
        raise DslError("empty DSL expression")
    parser = _Parser(_tokens(text))
    root = parser.expr()
    if parser.peek()[0] != "eof":
        raise DslError(f'parse: unexpected token "{parser.peek()[1]}" after expression')
    return root


def _link(expr: Expr, name: str, resolve: Callable[[str], str | None], sets: Mapping[str, str],
          refs: list[str]) -> Expr:  # fmt: skip
    if isinstance(expr, Leaf):
        model = resolve(expr.model)
        if model is None:
            raise DslError(f'set "{name}": unknown var or model "{expr.model}"', name)
        return Leaf(model)
    if isinstance(expr, Ref):
        if expr.set not in sets:
            raise DslError(f'set "{name}" references undefined set "{expr.set}"', name)
        if expr.set not in refs:
            refs.append(expr.set)
        return expr
    items = tuple(_link(item, name, resolve, sets, refs) for item in expr.items)
    return All(items) if isinstance(expr, All) else AnyOf(items)


def compile_sets(
    sets: Mapping[str, str], resolve: Callable[[str], str | None]
) -> tuple[MatrixSet, ...]:
    """Parse, resolve and link every set, in the solver's order. Raises DslError."""
    if not sets:
        raise DslError("matrix must define at least one set")
    linked: dict[str, MatrixSet] = {}
    deps: dict[str, list[str]] = {}
    for name, text in sets.items():
        try:
            tree = parse(text)
        except DslError as error:
            raise DslError(f'set "{name}": {error}', name) from None
        refs: list[str] = []
        linked[name] = MatrixSet(name, text, _link(tree, name, resolve, sets, refs))
        deps[name] = refs
    state: dict[str, int] = {}
    order: list[str] = []

    def visit(name: str) -> None:
        if state.get(name) == 1:
            raise DslError(f'circular reference detected involving set "{name}"', name)
        if state.get(name) == 2:
            return
        state[name] = 1
        for dep in deps[name]:
            visit(dep)
        state[name] = 2
        order.append(name)

    for name in sets:
        visit(name)
    return tuple(linked[name] for name in order)


def leaves(expr: Expr) -> set[str]:
    """The identifiers (before linking) or model ids (after) an expression names; references to
    other sets name nothing here."""
    if isinstance(expr, Leaf):
        return {expr.model}
    if isinstance(expr, All | AnyOf):
        return set().union(*(leaves(item) for item in expr.items))
    return set()


def named(sets: tuple[MatrixSet, ...]) -> frozenset[str]:
    """Every model compiled sets name (a model outside them all can only run alone)."""
    return frozenset().union(*(leaves(s.expr) for s in sets))


def _unique(states: Iterable[frozenset[str]]) -> list[frozenset[str]]:
    return list(dict.fromkeys(states))


class Projection:
    """Every combination a set allows, projected onto the `relevant` models (what the solver and
    the selectors' coexistence check ask about), each distinct projection once, in order."""

    def __init__(self, sets: tuple[MatrixSet, ...], relevant: frozenset[str]) -> None:
        self.relevant = relevant
        self.exprs = {s.name: s.expr for s in sets}
        self.memo: dict[str, list[frozenset[str]]] = {}

    def states(self, expr: Expr) -> list[frozenset[str]]:
        if isinstance(expr, Leaf):
            return [frozenset({expr.model}) & self.relevant]
        if isinstance(expr, Ref):
            if expr.set not in self.memo:
                self.memo[expr.set] = self.states(self.exprs[expr.set])
            return self.memo[expr.set]
        if isinstance(expr, AnyOf):
            return _unique(state for item in expr.items for state in self.states(item))
        assert isinstance(expr, All)
        combined = [frozenset[str]()]
        for item in expr.items:
            options = self.states(item)
            combined = _unique(a | b for a in combined for b in options)
        return combined


def can_contain_all(sets: tuple[MatrixSet, ...], models: frozenset[str]) -> bool:
    """Whether one combination of one set holds every model of `models`."""
    projection = Projection(sets, models)
    return any(state == models for s in sets for state in projection.states(s.expr))
