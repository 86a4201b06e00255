"""The filter language over an agent's memories (issue 22): one definition, parsed once and
compiled to one parameterised SQL condition that search's raw SQL embeds and lists and bulk
operations apply to a queryset (``MemoryFilter.q``), so there is one evaluator: PostgreSQL's.

In the spirit of mem0's v2 filters and LangGraph's store. A filter is a JSON object; its keys are
ANDed. A key is a field or a logical operator:

    {"AND": [f, ...]}  {"OR": [f, ...]}  {"NOT": f}        ("and", "$and" ... are accepted too)
    {"session_id": "s1"}                   equality, short for {"session_id": {"eq": "s1"}}
    {"importance": {"gte": 0.7}}           operators: eq ne in nin gt gte lt lte exists contains
    {"occurred_at": {"gte": "2026-01-01", "lt": "2026-02-01T00:00:00Z"}}   (naive times are UTC)
    {"tags": ["a", "b"]}                   carries all of them; {"tags": {"in": [...]}}: any of
    {"metadata": {"source": "slack", "priority": {"gt": 2}, "thread.id": {"exists": true}}}

A metadata key may name a nested value with dots (``thread.id``). An object given as a
metadata value without operators is matched by containment (PostgreSQL's ``@>``), as the
earlier ``metadata`` filter was, so the old fixed keys (session_id, memory_type, tags, metadata)
are a subset of this language and are compiled through it. Operators may be written ``$eq``.

Everything is checked before anything runs: unknown fields and operators, value types, and the
size limits below are 400s with stable codes that name what is accepted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL

from config.api import ApiError
from memory.episodic.policies import MEMORY_TYPES
from memory.models import MemoryRole

# Limits that keep a filter cheap to check and to plan.
FILTER_MAX_DEPTH = 6  # nested AND / OR / NOT
FILTER_MAX_CONDITIONS = 50  # field conditions in all
FILTER_MAX_LIST = 100  # values of one in / nin / tags list
FILTER_MAX_STRING = 1000  # characters of one value
FILTER_MAX_KEY = 100  # characters of one metadata key
FILTER_MAX_PATH = 5  # levels of a dotted metadata key

LOGICAL = {"and": "and", "or": "or", "not": "not"}

# The operators each kind of field takes.
TEXT_OPS = ("eq", "ne", "in", "nin")
NUMBER_OPS = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte")
TIME_OPS = ("eq", "ne", "gt", "gte", "lt", "lte")
TAGS_OPS = ("contains", "in", "nin", "exists")
METADATA_OPS = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "exists", "contains")
ALL_OPS = tuple(dict.fromkeys(NUMBER_OPS + TAGS_OPS + METADATA_OPS))


@dataclass(frozen=True)
class FieldSpec:
    kind: str  # text, integer, number, time, tags, metadata
    ops: tuple[str, ...]
    choices: tuple[str, ...] = ()
    nullable: bool = False


FIELDS: dict[str, FieldSpec] = {
    "id": FieldSpec("integer", NUMBER_OPS),
    "session_id": FieldSpec("text", TEXT_OPS),
    "memory_type": FieldSpec("text", TEXT_OPS, choices=MEMORY_TYPES),
    "role": FieldSpec("text", TEXT_OPS, choices=tuple(MemoryRole.values)),
    "importance": FieldSpec("number", NUMBER_OPS),
    "created_at": FieldSpec("time", TIME_OPS),
    "occurred_at": FieldSpec("time", TIME_OPS),
    "updated_at": FieldSpec("time", TIME_OPS),
    "expires_at": FieldSpec("time", (*TIME_OPS, "exists"), nullable=True),
    "tags": FieldSpec("tags", TAGS_OPS),
    "metadata": FieldSpec("metadata", METADATA_OPS),
}
# Columns the compiled SQL reads: a query that wraps memory_memory must select these.
FILTER_COLUMNS = tuple(name for name in FIELDS)


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    value: Any
    path: tuple[str, ...] = ()  # a metadata key's path


@dataclass(frozen=True)
class Logical:
    op: str  # and, or, not
    children: tuple[Node, ...]


Node = Condition | Logical


def _problem(code: str, message: str, where: str, **details: Any) -> ApiError:
    return ApiError(code=code, message=message, details={"path": where or "$", **details})


class _Parser:
    def __init__(self) -> None:
        self.conditions = 0

    def node(self, raw: Any, where: str, depth: int) -> Node:
        if depth > FILTER_MAX_DEPTH:
            raise _problem(
                "filter_too_complex",
                f"A filter nests AND / OR / NOT at most {FILTER_MAX_DEPTH} deep.",
                where,
            )
        if not isinstance(raw, dict):
            raise _problem(
                "filter_invalid_value",
                "A filter is a JSON object of fields and AND / OR / NOT.",
                where,
            )
        children: list[Node] = []
        for key, value in raw.items():
            here = f"{where}.{key}" if where else key
            logical = LOGICAL.get(key.lower().removeprefix("$"))
            if logical == "not":
                children.append(Logical("not", (self.node(value, here, depth + 1),)))
            elif logical is not None:
                if not isinstance(value, list) or not value:
                    raise _problem(
                        "filter_invalid_value", f"{key} takes a non-empty list of filters.", here
                    )
                if len(value) > FILTER_MAX_LIST:
                    raise _problem(
                        "filter_value_too_large",
                        f"{key} takes at most {FILTER_MAX_LIST} filters.",
                        here,
                    )
                parts = tuple(
                    self.node(item, f"{here}[{i}]", depth + 1) for i, item in enumerate(value)
                )
                children.append(Logical(logical, parts))
            elif key in FIELDS:
                children.extend(self.field(key, value, here))
            else:
                raise _problem(
                    "filter_unknown_field",
                    f"Unknown filter field {key!r}; fields are {', '.join(FIELDS)}, "
                    "combined with AND, OR and NOT.",
                    here,
                    accepted=[*FIELDS, "AND", "OR", "NOT"],
                )
        return children[0] if len(children) == 1 else Logical("and", tuple(children))

    def field(self, name: str, raw: Any, where: str) -> list[Node]:
        spec = FIELDS[name]
        if spec.kind == "metadata":
            if not isinstance(raw, dict):
                raise _problem(
                    "filter_invalid_value",
                    "metadata takes an object of keys, each a value or an object of operators.",
                    where,
                )
            return [self.metadata_key(key, value, f"{where}.{key}") for key, value in raw.items()]
        # Only metadata holds objects: elsewhere an object is always operators.
        if not isinstance(raw, dict) or not raw:
            return [self.condition(name, "contains" if spec.kind == "tags" else "eq", raw, where)]
        return [self.condition(name, op, value, f"{where}.{op}") for op, value in raw.items()]

    def metadata_key(self, key: str, raw: Any, where: str) -> Node:
        path = tuple(key.split("."))
        if not key or len(key) > FILTER_MAX_KEY or len(path) > FILTER_MAX_PATH or "" in path:
            raise _problem(
                "filter_invalid_value",
                f"A metadata key is 1 to {FILTER_MAX_KEY} characters, at most "
                f"{FILTER_MAX_PATH} dotted levels.",
                where,
            )
        if not _is_operators(raw, where):
            return self.condition("metadata", "eq", raw, where, path)
        parts = [
            self.condition("metadata", op, value, f"{where}.{op}", path)
            for op, value in raw.items()
        ]
        return parts[0] if len(parts) == 1 else Logical("and", tuple(parts))

    def condition(
        self, name: str, raw_op: str, value: Any, where: str, path: tuple[str, ...] = ()
    ) -> Condition:
        spec = FIELDS[name]
        op = raw_op.lower().removeprefix("$")
        if op not in spec.ops:
            raise _problem(
                "filter_unknown_operator",
                f"{name} takes the operators {', '.join(spec.ops)}; not {raw_op!r}.",
                where,
                accepted=list(spec.ops),
            )
        self.conditions += 1
        if self.conditions > FILTER_MAX_CONDITIONS:
            raise _problem(
                "filter_too_complex",
                f"A filter holds at most {FILTER_MAX_CONDITIONS} conditions.",
                where,
            )
        return Condition(name, op, _checked(spec, op, value, where), path)


def _is_operators(raw: Any, where: str) -> bool:
    """Whether an object is operators ({"gte": 1}) rather than a value to match."""
    if not isinstance(raw, dict) or not raw:
        return False
    named = [key.lower().removeprefix("$") in ALL_OPS for key in raw]
    if all(named):
        return True
    if any(named):
        raise _problem(
            "filter_invalid_value",
            "An object mixes operators and other keys; to match an object holding such keys "
            'literally use {"eq": {...}}.',
            where,
            keys=sorted(raw),
        )
    return False


def _invalid(where: str, message: str) -> ApiError:
    return _problem("filter_invalid_value", message, where)


def _text(value: Any, where: str, choices: tuple[str, ...] = ()) -> str:
    if not isinstance(value, str):
        raise _invalid(where, "Expected a string.")
    if len(value) > FILTER_MAX_STRING:
        raise _problem(
            "filter_value_too_large", f"A value has at most {FILTER_MAX_STRING} characters.", where
        )
    if choices and value not in choices:
        raise _problem(
            "filter_invalid_value",
            f"{value!r} is not one of {', '.join(choices)}.",
            where,
            accepted=list(choices),
        )
    return value


def _number(value: Any, where: str, *, integer: bool = False) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(where, "Expected a number.")
    if integer and not isinstance(value, int):
        raise _invalid(where, "Expected an integer.")
    if not math.isfinite(value) or abs(value) > 2**62:
        raise _invalid(where, "Expected a finite number.")
    return int(value) if isinstance(value, int) else float(value)


def _time(value: Any, where: str) -> datetime:
    message = 'Expected an ISO 8601 date or date-time, e.g. "2026-01-31" or "2026-01-31T09:00Z".'
    if not isinstance(value, str) or len(value) > 64:
        raise _invalid(where, message)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _invalid(where, message) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _json_scalar(value: Any, where: str) -> Any:
    if isinstance(value, str):
        return _text(value, where)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number(value, where)
    if value is None or isinstance(value, bool):
        return value
    raise _invalid(where, "Expected a string, number, boolean or null.")


def _list(value: Any, where: str, item: Callable[[Any, str], Any]) -> tuple[Any, ...]:
    if not isinstance(value, list) or not value:
        raise _invalid(where, "Expected a non-empty list.")
    if len(value) > FILTER_MAX_LIST:
        raise _problem(
            "filter_value_too_large", f"A list has at most {FILTER_MAX_LIST} values.", where
        )
    return tuple(item(v, f"{where}[{i}]") for i, v in enumerate(value))


def _checked(spec: FieldSpec, op: str, value: Any, where: str) -> Any:
    """The value of one condition, typed for its field and operator."""
    if op == "exists":
        if not isinstance(value, bool):
            raise _invalid(where, "exists takes true or false.")
        return value
    scalar: Callable[[Any, str], Any]
    if spec.kind == "text":
        scalar = lambda v, w: _text(v, w, spec.choices)  # noqa: E731
    elif spec.kind == "integer":
        scalar = lambda v, w: _number(v, w, integer=True)  # noqa: E731
    elif spec.kind == "number":
        scalar = _number
    elif spec.kind == "time":
        scalar = _time
    elif spec.kind == "tags":
        if op == "contains" and isinstance(value, str):
            return (_text(value, where),)
        return _list(value, where, _text)
    else:  # metadata
        if op == "eq" and isinstance(value, dict | list):
            if len(json.dumps(value)) > FILTER_MAX_STRING:
                raise _problem(
                    "filter_value_too_large",
                    f"A value has at most {FILTER_MAX_STRING} characters as JSON.",
                    where,
                )
            return value
        if op in ("gt", "gte", "lt", "lte") and not (
            isinstance(value, str)
            or (isinstance(value, int | float) and not isinstance(value, bool))
        ):
            raise _invalid(where, f"{op} compares with a number or a string.")
        if op == "contains" and value is None:
            raise _invalid(where, "contains takes a string, number or boolean.")
        scalar = _json_scalar
    if op in ("in", "nin"):
        return _list(value, where, scalar)
    return scalar(value, where)


# --- compiling ----------------------------------------------------------------------------------

COMPARISON = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
ARRAY_TYPE = {"text": "text[]", "integer": "bigint[]", "number": "float8[]"}
# The names of a compiled filter's parameters: %(filter_0)s, ...
FILTER_PREFIX = "filter_"


class _Sql:
    """Collects parameters as the SQL is written: named ones for search's raw SQL, positional
    ones (``%s``) for Django."""

    def __init__(self, prefix: str | None, alias: str | None) -> None:
        self.prefix = prefix
        self.alias = alias
        self.named: dict[str, Any] = {}
        self.positional: list[Any] = []

    def param(self, value: Any) -> str:
        if self.prefix is None:
            self.positional.append(value)
            return "%s"
        name = f"{self.prefix}{len(self.named)}"
        self.named[name] = value
        return f"%({name})s"

    def column(self, name: str) -> str:
        return f'{self.alias}."{name}"' if self.alias else name

    def node(self, node: Node) -> str:
        if isinstance(node, Logical):
            if node.op == "not":
                return f"NOT ({self.node(node.children[0])})"
            if not node.children:  # {} (or an empty metadata object) keeps every row
                return "true"
            joined = f" {node.op.upper()} ".join(f"({self.node(c)})" for c in node.children)
            return joined
        return self.condition(node)

    def condition(self, c: Condition) -> str:
        spec = FIELDS[c.field]
        column = self.column(c.field)
        if spec.kind == "metadata":
            return self.metadata(column, c)
        if spec.kind == "tags":
            values = self.param(list(c.value)) if c.op != "exists" else ""
            return {
                "contains": f"{column} @> {values}::varchar[]",
                "in": f"{column} && {values}::varchar[]",
                "nin": f"NOT ({column} && {values}::varchar[])",
                "exists": f"cardinality({column}) {'>' if c.value else '='} 0",
            }[c.op]
        if c.op == "exists":
            return f"{column} IS {'NOT ' if c.value else ''}NULL"
        if c.op in ("in", "nin"):
            values = f"{self.param(list(c.value))}::{ARRAY_TYPE.get(spec.kind, 'text[]')}"
            match = f"{column} = ANY({values})"
            return match if c.op == "in" else f"NOT ({match})"
        if c.op == "ne":
            return f"{column} IS DISTINCT FROM {self.param(c.value)}"
        return f"{column} {COMPARISON[c.op]} {self.param(c.value)}"

    def metadata(self, column: str, c: Condition) -> str:
        def holding(value: Any) -> str:
            document: Any = value
            for key in reversed(c.path):
                document = {key: document}
            return f"{column} @> {self.param(json.dumps(document))}::jsonb"

        # JSON path of the key: each level a quoted member name.
        member = "$" + "".join(f".{json.dumps(key)}" for key in c.path)
        if c.op == "eq":
            return holding(c.value)
        if c.op == "ne":
            return f"NOT ({holding(c.value)})"
        if c.op in ("in", "nin"):
            anyof = " OR ".join(holding(value) for value in c.value)
            return f"({anyof})" if c.op == "in" else f"NOT ({anyof})"
        if c.op == "exists":
            found = f"{column} @? {self.param(member)}::jsonpath"
            return found if c.value else f"NOT ({found})"
        if c.op == "contains":
            # An array holding the value, or a string holding it as a substring ("q": literal).
            within = holding([c.value])
            if isinstance(c.value, str):
                text = f'{member} ? (@ like_regex {json.dumps(c.value)} flag "q")'
                return f"({within} OR {column} @? {self.param(text)}::jsonpath)"
            return within
        # Ranges compare like with like: a number with numbers, a string with strings; other
        # values never match (SQL/JSON path's strict comparison, no cast that could fail).
        compare = f"{member} ? (@ {COMPARISON[c.op]} {json.dumps(c.value)})"
        return f"{column} @? {self.param(compare)}::jsonpath"


@dataclass(frozen=True)
class MemoryFilter:
    """A parsed filter over one agent's memories; empty when ``root`` is None."""

    root: Node | None = None

    def sql(
        self, *, prefix: str = FILTER_PREFIX, alias: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The condition as SQL with named parameters ``%(<prefix>N)s``; "true" when empty."""
        if self.root is None:
            return "true", {}
        writer = _Sql(prefix, alias)
        return writer.node(self.root), writer.named

    def q(self) -> Q:
        """The same condition for a queryset of memories."""
        if self.root is None:
            return Q()
        writer = _Sql(None, "memory_memory")
        text = writer.node(self.root)
        # Every value is a parameter; the text holds only names from FIELDS and operators.
        return Q(RawSQL(text, writer.positional, output_field=BooleanField()))  # noqa: S611

    def _conjuncts(self) -> tuple[Node, ...]:
        if self.root is None:
            return ()
        if isinstance(self.root, Logical) and self.root.op == "and":
            return self.root.children
        return (self.root,)

    def metadata_terms(self) -> MetadataTerms | None:
        """For a filter that keeps only rows whose metadata key equals one of a few texts or
        booleans (a top-level condition of it, with AND): one document per value, whose terms
        (``memory_metadata_terms`` in SQL, memory.search.models.MemoryMetadataTerm) name every
        row the condition keeps and no other, and the rest of the filter. None when no
        condition is of that kind; of several, the one naming fewest values."""
        found: list[tuple[list[dict[str, Any]], Node]] = []
        conjuncts = self._conjuncts_flat()
        for node in conjuncts:
            if not (
                isinstance(node, Condition)
                and node.field == "metadata"
                and len(node.path) == 1
                and node.op in ("eq", "in")
            ):
                continue
            values = (node.value,) if node.op == "eq" else tuple(node.value)
            key = node.path[0]
            if values and all(_term_sized(key, value) for value in values):
                found.append(([{key: value} for value in values], node))
        if not found:
            return None
        documents, chosen = min(found, key=lambda pair: len(pair[0]))
        rest = [node for node in conjuncts if node is not chosen]
        if not rest:
            return MetadataTerms(documents, MemoryFilter())
        return MetadataTerms(
            documents, MemoryFilter(rest[0] if len(rest) == 1 else Logical("and", tuple(rest)))
        )

    def _conjuncts_flat(self) -> list[Node]:
        flat: list[Node] = []
        pending = list(self._conjuncts())
        while pending:
            node = pending.pop(0)
            if isinstance(node, Logical) and node.op == "and":
                pending[:0] = node.children
            else:
                flat.append(node)
        return flat

    @property
    def session_id(self) -> str | None:
        """The one session every match belongs to, when the filter says so at its top level."""
        for node in self._conjuncts():
            if isinstance(node, Condition) and node.field == "session_id" and node.op == "eq":
                return str(node.value)
        return None

    @property
    def narrowing(self) -> bool:
        """Whether it keeps an unknown share of the agent's rows (anything beyond one session)."""
        return any(
            not (isinstance(n, Condition) and n.field == "session_id" and n.op == "eq")
            for n in self._conjuncts()
        )

    def __and__(self, other: MemoryFilter) -> MemoryFilter:
        if self.root is None:
            return other
        if other.root is None:
            return self
        return MemoryFilter(Logical("and", (*self._conjuncts(), *other._conjuncts())))


@dataclass(frozen=True)
class MetadataTerms:
    """A filter's condition on metadata values, as documents whose terms name its rows, and
    what else the filter asks of them."""

    documents: list[dict[str, Any]]
    rest: MemoryFilter


# A metadata term longer than this (key and value as JSON text) may have been left out of the
# terms table (memory_metadata_terms keeps up to 1,000 bytes): such a value is never looked up
# there.
TERM_MAX_BYTES = 900


def _term_sized(key: str, value: Any) -> bool:
    """Whether ``value`` of ``key`` is a term: a text or boolean short enough to be kept."""
    if not isinstance(value, str | bool):
        return False
    text = json.dumps(key, ensure_ascii=False) + json.dumps(value, ensure_ascii=False)
    return len(text.encode()) <= TERM_MAX_BYTES


def filter_parse(raw: Mapping[str, Any] | None) -> MemoryFilter:
    """A filter from its JSON form (see the module's docstring); ApiError (400) if invalid."""
    if raw is None or raw == {}:
        return MemoryFilter()
    if not isinstance(raw, dict):
        raise ApiError(
            code="invalid_filters",
            message="A filter is a JSON object of fields and AND / OR / NOT.",
        )
    return MemoryFilter(_Parser().node(raw, "", 0))
