"""Fuzzing by input class: hostile values sent to every operation whose schema takes such a field.

schemathesis (tests/test_fuzz_api.py) draws values that fit the schema; the classes issue 18 found
mostly do not: lone surrogates and NUL in any text, JSON nested past the limit, time-zone
offsets of a day and impossible dates, tampered cursors, vectors without a direction, and
regexes that backtrack. Each class has a hypothesis strategy here, and each test sends it to
every operation of the served OpenAPI schema that takes such a field, so an operation added
later is fuzzed without being listed. Each answer must be the class's 4xx (or, where the value
turns out valid, no 5xx), and a refused write must leave every table as it was.

Bounded like the schemathesis run: ``FUZZ_MAX_EXAMPLES`` per test (3 by default, derandomized);
``bench/fuzz_api.py`` runs them longer with fresh randomness.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from config.api import MAX_JSON_DEPTH
from config.datetimes import client_datetime_parse
from ledger import services
from ledger.models import Role
from memory.content.services import ItemDraft, content_item_store
from memory.embeddings.local_embedder import DIMENSIONS
from memory.episodic.services import MemoryDraft, memories_store
from tests.openapi_operations import (
    OPERATIONS,
    PAGINATED,
    WRITES,
    Operation,
    resolved,
    table_rows,
)

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "3"))
FUZZ = hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("FUZZ_RANDOM", "") == "",
    suppress_health_check=list(HealthCheck),
)

# --- Strategies, one per class ------------------------------------------------------------------

LONE_SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
hostile_text = st.builds(
    lambda before, bad, after: before + bad + after,
    st.text(max_size=20),
    st.one_of(LONE_SURROGATES, st.just("\x00")),
    st.text(max_size=20),
)


def _nested(depth: int, kinds: list[bool]) -> str:
    opened = "".join('{"k":' if is_object else "[" for is_object in kinds[:depth])
    closed = "".join("}" if is_object else "]" for is_object in reversed(kinds[:depth]))
    return opened + "1" + closed


too_deep_json = st.integers(min_value=MAX_JSON_DEPTH, max_value=3000).flatmap(
    lambda depth: st.lists(st.booleans(), min_size=depth, max_size=depth).map(
        lambda kinds: _nested(len(kinds), kinds)
    )
)

date_times = st.builds(
    lambda y, mo, d, h, mi, sign, oh, om, zulu: (
        f"{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:00" + ("Z" if zulu else f"{sign}{oh:02}:{om:02}")
    ),
    st.integers(1, 9999),
    st.integers(1, 13),
    st.integers(1, 31),
    st.integers(0, 24),
    st.integers(0, 59),
    st.sampled_from("+-"),
    st.integers(0, 99),
    st.integers(0, 99),
    st.booleans(),
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()


tampered_cursors = st.one_of(
    st.builds(
        lambda o, r, p: _b64(f"o={o}&r={r}&p={p}"),
        st.one_of(st.integers(-5, 5000), st.text(max_size=5)),
        st.one_of(st.sampled_from("01"), st.text(max_size=3)),
        st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=10)),
    ),
    st.text(min_size=1, max_size=30),
    st.binary(min_size=1, max_size=30).map(lambda b: base64.b64encode(b).decode()),
)

# All zeros (signed), or values pgvector's float32 cannot square: tiny, huge, or a mix.
awkward_vectors = st.builds(
    lambda magnitude, signs, zeros: [
        0.0 if zero else (magnitude if positive else -magnitude)
        for positive, zero in zip(signs, zeros, strict=True)
    ],
    st.one_of(st.just(0.0), st.floats(5e-324, 1e-20), st.floats(1e20, 1e300)),
    st.lists(st.booleans(), min_size=DIMENSIONS, max_size=DIMENSIONS),
    st.one_of(
        st.just([True] * DIMENSIONS),
        st.lists(st.booleans(), min_size=DIMENSIONS, max_size=DIMENSIONS),
    ),
)


def _backtracking(atom: str, repeat: int) -> str:
    return f"({atom}|{atom})*b" if repeat % 2 else f"({atom}+)+" + "b" * (repeat % 3 + 1)


catastrophic_patterns = st.one_of(
    st.builds(_backtracking, st.sampled_from(["a", "aa", ".", "a?", "\\w"]), st.integers(1, 9)),
    st.builds(lambda n: f"(.*a){{{n}}}b", st.integers(5, 40)),
    st.builds(lambda n: f"a[ab]{{{n}}}x", st.integers(100, 1000)),
    st.sampled_from(["(?<=a)b", "(a)\\1", "a(?!b)", "(?P<x>a)(?P=x)", "(*", "a{1001}"]),
)

# --- Fixtures --------------------------------------------------------------------------------


@pytest.fixture
def world(db: None) -> dict[str, Any]:
    """A tenant with an agent, a memory, a content item of 40 KB of "a"s and an admin key; the
    ids by the collection a path names them in."""
    tenant = services.tenant_create(name="Fuzz", slug="fuzz-inputs")
    agent = services.agent_create(tenant=tenant, name="Fuzzer", actor="system")
    _, key = services.api_key_create(
        tenant=tenant, name="admin", role=Role.ADMIN, agent=None, actor="system"
    )
    item = content_item_store(
        agent=agent, actor="system", draft=ItemDraft(content=("a" * 200 + "\n") * 200)
    )
    memory = memories_store(agent=agent, drafts=[MemoryDraft(content="fuzz")], actor="system")[0]
    return {"key": key, "ids": {"agents": agent.pk, "memories": memory.pk, "items": item.key}}


def _url(operation: Operation, world: dict[str, Any]) -> str:
    """The operation's path with each variable set to the fixture's object of its collection."""
    segments = operation.path.split("/")
    for index, segment in enumerate(segments):
        if segment.startswith("{"):
            segments[index] = str(world["ids"].get(segments[index - 1], 1))
    return "/".join(segments)


def _call(world: dict[str, Any], method: str, url: str, **kwargs: Any) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['key']}")
    client.raise_request_exception = False
    with transaction.atomic():  # every example starts from the fixture's rows
        response = getattr(client, method)(url, **kwargs)
        transaction.set_rollback(True)
    return response


def _body_properties(operation: Operation) -> list[str]:
    return list((operation.body_schema or {}).get("properties", {})) or ["value"]


# --- Bodies: hostile text and nesting, anywhere ---------------------------------------------


@pytest.mark.parametrize("operation", WRITES, ids=str)
@FUZZ
@given(data=st.data())
def test_hostile_text_or_nesting_in_any_body_field_is_a_400_that_writes_nothing(
    world, operation, data
):
    field = data.draw(st.sampled_from(_body_properties(operation)))
    if data.draw(st.booleans()):
        raw, code = json.dumps(data.draw(hostile_text)), "invalid_value"
    else:
        raw, code = data.draw(too_deep_json), "too_deep"
    before = table_rows()

    response = _call(
        world,
        operation.method,
        operation.url(),
        data=f'{{"{field}": {raw}}}',
        content_type="application/json",
    )

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code
    assert table_rows() == before


# --- Date-times, in query parameters and in bodies ------------------------------------------


def _date_time_fields(operation: Operation) -> list[tuple[str, str]]:
    """("query" or "body", name) of every date-time field the operation takes."""
    found = [
        ("query", name)
        for name, parameter in operation.query_parameters.items()
        if parameter.get("schema", {}).get("format") == "date-time"
    ]
    for name, schema in (operation.body_schema or {}).get("properties", {}).items():
        if resolved(schema).get("format") == "date-time" and not schema.get("readOnly"):
            found.append(("body", name))
    return found


DATE_TIME_OPERATIONS = [op for op in OPERATIONS if _date_time_fields(op)]


@pytest.mark.parametrize("operation", DATE_TIME_OPERATIONS, ids=str)
@FUZZ
@given(data=st.data())
def test_a_date_time_naming_no_instant_is_a_400_and_any_other_no_500(world, operation, data):
    where, name = data.draw(st.sampled_from(_date_time_fields(operation)))
    value = data.draw(date_times)
    if where == "query":
        response = _call(world, "get", _url(operation, world), data={name: value})
    else:
        body = _skeleton(operation.body_schema or {}, (name,), value)
        response = _call(world, operation.method, _url(operation, world), data=body, format="json")

    assert response.status_code < 500, response.content
    if client_datetime_parse(value) is None:
        assert response.status_code == 400, (value, response.content)


# --- Cursors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", PAGINATED, ids=str)
@FUZZ
@given(cursor=tampered_cursors)
def test_a_tampered_cursor_is_a_400_invalid_cursor_or_a_page(world, operation, cursor):
    # A path with a variable names the fixture's own object: an unknown one would be a 404.
    response = _call(world, "get", _url(operation, world), data={"cursor": cursor})

    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        # A NUL is refused as such before the cursor is read (config.api.query_parameters_check).
        expected = "invalid_value" if "\x00" in cursor else "invalid_cursor"
        assert response.json()["error"]["code"] == expected


# --- Vectors ------------------------------------------------------------------------------


def _vector_paths(schema: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Where a request schema takes an array of numbers ("[]" steps into an array's items)."""
    schema = resolved(schema)
    found = []
    if schema.get("type") == "array":
        items = resolved(schema.get("items", {}))
        if items.get("type") == "number":
            found.append(path)
        found += _vector_paths(items, (*path, "[]"))
    for name, child in schema.get("properties", {}).items():
        found += _vector_paths(child, (*path, name))
    return found


_PLACEHOLDERS = {"string": "fuzz", "integer": 1, "number": 0.5, "boolean": False}


def _skeleton(schema: dict[str, Any], path: tuple[str, ...], leaf: Any) -> Any:
    """The smallest body the schema takes around ``leaf`` at ``path`` ("[]" is an array's item):
    required fields get placeholders (an agent: the fixture's), so the leaf is what decides."""
    schema = resolved(schema)
    if not path:
        return leaf
    step, rest = path[0], path[1:]
    if step == "[]":
        return [_skeleton(schema.get("items", {}), rest, leaf)]
    body: dict[str, Any] = {}
    for name, child in schema.get("properties", {}).items():
        child = resolved(child)
        if name == "agent":
            body[name] = "Fuzzer"
        elif name in schema.get("required", []):
            if "enum" in child:
                body[name] = child["enum"][0]
            elif child.get("type") == "array":
                body[name] = []
            elif child.get("type") == "object":
                body[name] = {}
            else:
                body[name] = _PLACEHOLDERS.get(child.get("type", "string"), "fuzz")
    body[step] = _skeleton(schema["properties"][step], rest, leaf)
    return body


VECTOR_FIELDS = [
    (op, path) for op in WRITES for path in _vector_paths(op.body_schema or {}) if path
]


@pytest.mark.parametrize(("operation", "path"), VECTOR_FIELDS, ids=str)
@FUZZ
@given(vector=awkward_vectors)
def test_a_vector_without_a_direction_is_refused_and_any_other_taken(
    world, operation, path, vector
):
    body = _skeleton(operation.body_schema or {}, path, vector)
    before = table_rows()

    response = _call(world, operation.method, _url(operation, world), data=body, format="json")

    if any(vector):
        assert 200 <= response.status_code < 300, (vector[:3], response.content)
    else:
        assert response.status_code == 400, response.content
        assert response.json()["error"]["code"] == "invalid_embedding"
        assert table_rows() == before


# --- Regexes ------------------------------------------------------------------------------

PATTERN_OPERATIONS = [op for op in OPERATIONS if "pattern" in op.query_parameters]


@pytest.mark.parametrize("operation", PATTERN_OPERATIONS, ids=str)
@FUZZ
@given(pattern=catastrophic_patterns)
def test_a_catastrophic_pattern_answers_within_a_second(world, operation, pattern):
    params = {"pattern": pattern}
    if "transform" in operation.query_parameters:
        params["transform"] = "filtered"
    started = time.monotonic()

    response = _call(world, "get", _url(operation, world), data=params)

    assert time.monotonic() - started < 1.0, pattern
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert response.json()["error"]["code"] in {
            "invalid_pattern",
            "unsupported_pattern",
            "pattern_too_costly",
        }


def test_every_class_reaches_an_operation():
    # A class with nothing to reach would pass silently: the schema must offer each a target.
    assert WRITES
    assert DATE_TIME_OPERATIONS
    assert PAGINATED
    assert VECTOR_FIELDS
    assert PATTERN_OPERATIONS
