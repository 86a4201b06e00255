"""The filter language (memory.search.filters): checked before anything runs, and compiled once
into SQL that search, lists and bulk operations all run on real PostgreSQL."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from config.api import ApiError
from ledger.models import Role
from memory.episodic.services import MemoryDraft, memories_store
from memory.episodic.validity import CURRENTLY_VALID
from memory.models import Memory, MemoryMetadataTerm
from memory.search import legs, plans
from memory.search.filters import (
    FILTER_MAX_CONDITIONS,
    FILTER_MAX_DEPTH,
    FILTER_MAX_LIST,
    FILTER_MAX_STRING,
    filter_parse,
)
from memory.search.selectors import memories_search

DAY = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def problem(raw):
    with pytest.raises(ApiError) as raised:
        filter_parse(raw)
    return raised.value.error_code, raised.value.details


# --- checked before anything runs ----------------------------------------------------------------


def test_an_unknown_field_is_refused_naming_the_fields_there_are():
    code, details = problem({"OR": [{"colour": "red"}]})

    assert code == "filter_unknown_field"
    assert details["path"] == "OR[0].colour"
    assert "importance" in details["accepted"]
    assert "NOT" in details["accepted"]


def test_an_unknown_operator_is_refused_naming_the_operators_of_that_field():
    code, details = problem({"importance": {"between": [0, 1]}})

    assert code == "filter_unknown_operator"
    assert details["accepted"] == ["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte"]
    assert problem({"session_id": {"gt": "a"}})[1]["accepted"] == ["eq", "ne", "in", "nin"]


@pytest.mark.parametrize(
    "raw",
    [
        {"importance": "high"},
        {"importance": {"gte": True}},
        {"importance": {"gte": float("nan")}},
        {"id": {"in": [1.5]}},
        {"occurred_at": {"gte": "last tuesday"}},
        {"memory_type": "gossip"},
        {"role": {"in": ["user", "robot"]}},
        {"tags": 5},
        {"tags": {"in": []}},
        {"expires_at": {"exists": "yes"}},
        {"metadata": ["a"]},
        {"metadata": {"n": {"gt": [1]}}},
        {"metadata": {"n": {"gt": 1, "colour": 2}}},
        {"metadata": {"a..b": 1}},
        {"AND": {}},
        {"NOT": [1]},
    ],
)
def test_a_value_of_the_wrong_type_is_refused(raw):
    assert problem(raw)[0] == "filter_invalid_value"


def test_limits_keep_a_filter_small():
    deep: dict = {"session_id": "s"}
    for _ in range(FILTER_MAX_DEPTH + 1):
        deep = {"NOT": deep}
    many = {"OR": [{"importance": {"gte": i / 100}} for i in range(FILTER_MAX_CONDITIONS + 1)]}

    assert problem(deep)[0] == "filter_too_complex"
    assert problem(many)[0] == "filter_too_complex"
    assert problem({"id": {"in": list(range(FILTER_MAX_LIST + 1))}})[0] == "filter_value_too_large"
    assert problem({"session_id": "x" * (FILTER_MAX_STRING + 1)})[0] == "filter_value_too_large"


def test_the_old_fixed_keys_are_the_same_filter_in_the_language():
    old = filter_parse({"session_id": "s1", "tags": ["a", "b"], "metadata": {"team": "red"}})
    spelled = filter_parse(
        {
            "AND": [
                {"session_id": {"eq": "s1"}},
                {"tags": {"contains": ["a", "b"]}},
                {"metadata": {"team": {"$eq": "red"}}},
            ]
        }
    )

    assert old.sql() == spelled.sql()
    assert old.session_id == "s1"
    assert old.narrowing
    assert filter_parse({"session_id": "s1"}).narrowing is False


# --- compiled once, run by PostgreSQL -------------------------------------------------------------


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Atlas")


@pytest.fixture
def memories(agent, no_embedder):
    rows: list[tuple[str, str, str, float, list[str], dict[str, Any]]] = [
        ("slack deploy", "s1", "fact", 0.9, ["ops", "prod"], {"source": "slack", "priority": 3}),
        ("email invoice", "s1", "decision", 0.2, ["billing"], {"source": "email", "priority": 1}),
        ("call notes", "s2", "conversation", 0.5, [], {"source": "call", "thread": {"id": "t1"}}),
        ("doc draft", "s2", "fact", 0.7, ["ops"], {"source": "doc", "labels": ["draft", "q3"]}),
        ("no metadata", "s3", "error", 0.1, ["prod"], {}),
    ]
    stored = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(
                content=content,
                session_id=session,
                memory_type=kind,
                importance=importance,
                tags=tags,
                metadata=metadata,
                occurred_at=DAY + timedelta(days=i),
            )
            for i, (content, session, kind, importance, tags, metadata) in enumerate(rows)
        ],
        actor="system",
    )
    return {memory.content: memory for memory in stored}


CASES = [
    ({"session_id": "s1"}, {"slack deploy", "email invoice"}),
    ({"session_id": {"ne": "s1"}}, {"call notes", "doc draft", "no metadata"}),
    ({"memory_type": {"in": ["fact", "error"]}}, {"slack deploy", "doc draft", "no metadata"}),
    ({"importance": {"gte": 0.5, "lt": 0.9}}, {"call notes", "doc draft"}),
    ({"occurred_at": {"gte": "2026-03-03", "lt": "2026-03-05T00:00:00Z"}},
     {"email invoice", "call notes"}),
    ({"tags": "ops"}, {"slack deploy", "doc draft"}),
    ({"tags": ["ops", "prod"]}, {"slack deploy"}),
    ({"tags": {"in": ["billing", "prod"]}}, {"slack deploy", "email invoice", "no metadata"}),
    ({"tags": {"nin": ["ops"]}}, {"email invoice", "call notes", "no metadata"}),
    ({"tags": {"exists": False}}, {"call notes"}),
    ({"metadata": {"source": "slack"}}, {"slack deploy"}),
    ({"metadata": {"source": {"ne": "slack"}}},
     {"email invoice", "call notes", "doc draft", "no metadata"}),
    ({"metadata": {"source": {"in": ["call", "doc"]}}}, {"call notes", "doc draft"}),
    ({"metadata": {"source": {"nin": ["call", "doc"]}}},
     {"slack deploy", "email invoice", "no metadata"}),
    ({"metadata": {"priority": {"gt": 1}}}, {"slack deploy"}),
    # Like with like: a string bound never matches a number.
    ({"metadata": {"priority": {"gt": "1"}}}, set()),
    ({"metadata": {"source": {"lt": "doc"}}}, {"call notes"}),
    ({"metadata": {"thread.id": "t1"}}, {"call notes"}),
    ({"metadata": {"thread": {"id": "t1"}}}, {"call notes"}),
    ({"metadata": {"thread.id": {"exists": True}}}, {"call notes"}),
    ({"metadata": {"priority": {"exists": False}}}, {"call notes", "doc draft", "no metadata"}),
    ({"metadata": {"labels": {"contains": "q3"}}}, {"doc draft"}),
    ({"metadata": {"source": {"contains": "mai"}}}, {"email invoice"}),
    ({"OR": [{"session_id": "s3"}, {"importance": {"gte": 0.9}}]},
     {"slack deploy", "no metadata"}),
    ({"NOT": {"OR": [{"session_id": "s1"}, {"tags": "ops"}]}}, {"call notes", "no metadata"}),
    ({"$and": [{"tags": "prod"}, {"$not": {"memory_type": "error"}}]}, {"slack deploy"}),
    ({}, {"slack deploy", "email invoice", "call notes", "doc draft", "no metadata"}),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_each_operator_keeps_the_memories_it_names(agent, memories, raw, expected):
    parsed = filter_parse(raw)
    listed = Memory.objects.filter(agent=agent).filter(parsed.q())
    sql, params = parsed.sql()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM memory_memory WHERE agent_id = %(agent)s AND ({sql})",  # noqa: S608
            {"agent": agent.pk, **params},
        )
        raw_ids = {row[0] for row in cursor.fetchall()}

    assert {m.content for m in listed} == expected
    assert raw_ids == {m.pk for m in listed}  # the search's SQL and the queryset agree


@pytest.fixture
def api(tenant, agent, api_as, memories):
    return api_as(tenant, role=Role.AGENT, agent=agent)


def test_the_list_takes_a_filter_and_the_old_parameters_with_it(api):
    def listed(**params):
        response = api.get("/api/v1/memories/", params)
        assert response.status_code == 200, response.content
        return {m["content"] for m in response.json()["results"]}

    wanted = {"OR": [{"importance": {"gte": 0.9}}, {"metadata": {"source": "email"}}]}
    assert listed(filter=json.dumps(wanted)) == {"slack deploy", "email invoice"}
    assert listed(filter=json.dumps(wanted), session_id="s1", tag="ops") == {"slack deploy"}
    assert listed(metadata='{"thread": {"id": "t1"}}') == {"call notes"}


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("{", "invalid_filter"),
        ("[1]", "invalid_filter"),
        ('{"importance": {"near": 1}}', "filter_unknown_operator"),
        ('{"owner": "me"}', "filter_unknown_field"),
    ],
)
def test_a_bad_list_filter_is_a_400_with_its_code(api, value, code):
    response = api.get("/api/v1/memories/", {"filter": value})

    assert (response.status_code, response.json()["error"]["code"]) == (400, code)


def test_search_takes_the_language(api):
    def found(filters):
        response = api.post(
            "/api/v1/memories/search/",
            {"query": "deploy invoice notes draft", "filters": filters, "top_k": 10},
            format="json",
        )
        assert response.status_code == 200, response.content
        return {hit["content"] for hit in response.json()["results"]}

    assert found({"NOT": {"session_id": "s1"}}) == {"call notes", "doc draft"}
    assert found({"metadata": {"priority": {"lte": 1}}}) == {"email invoice"}


@pytest.mark.parametrize(
    ("exact_max", "index_first_margin"),
    [
        (2000, legs.FILTERED_INDEX_FIRST_MARGIN),  # rows first: few, so exact
        (0, legs.FILTERED_INDEX_FIRST_MARGIN),  # the index alone
        # The index first, as for a filter expected to keep many rows: it comes back short of
        # the rows asked for, so the bounded read runs after it and the exact path answers.
        (2000, 0),
    ],
)
def test_a_large_agents_filtered_search_finds_the_filters_rows_exactly_or_by_the_index(
    agent, memories, monkeypatch, exact_max, index_first_margin
):
    """A large agent's filtered semantic leg reads a selective filter's rows and sorts them;
    past FILTERED_EXACT_MAX_ROWS the HNSW index serves it; a filter the planner expects to keep
    many rows tries the index first. Each gives the filter's rows."""
    monkeypatch.setattr(plans, "EXACT_SCAN_MAX_MEMORIES", 0)
    monkeypatch.setattr(legs, "FILTERED_EXACT_MAX_ROWS", exact_max)
    monkeypatch.setattr(legs, "FILTERED_INDEX_FIRST_MARGIN", index_first_margin)
    Memory.objects.filter(agent=agent).update(embedding=[1.0] + [0.0] * 383)
    outcome = memories_search(
        agent=agent,
        query="zzz",
        vector=[1.0] + [0.0] * 383,
        filters=filter_parse({"tags": "ops", "importance": {"gt": 0.8}}),
        top_k=10,
        threshold=-1,
        now=timezone.now(),
        record_retrieval=False,
    )

    assert {hit.content for hit in outcome.hits} == {"slack deploy"}


def test_a_large_agents_filtered_search_starts_no_parallel_workers(agent, memories, monkeypatch):
    """The index branch of a filtered leg, gated off when the filter keeps few rows, was planned
    as a parallel scan: every search started two workers that found nothing to do (two thirds
    of the database part at a load of 4, bench/memory_scale.py). A search reads a few thousand
    rows at most."""
    monkeypatch.setattr(plans, "EXACT_SCAN_MAX_MEMORIES", 0)
    sql, params = legs.memory_candidates_query(
        agent=agent,
        query="zzz",
        vector=[1.0] + [0.0] * 383,
        filters=filter_parse({"metadata": {"source": {"in": ["slack", "doc"]}}}),
        now=timezone.now(),
    )
    with transaction.atomic(), connection.cursor() as cursor:
        # Free workers: what makes the planner reach for them even on a table of five rows.
        for setting in (
            "parallel_setup_cost",
            "parallel_tuple_cost",
            "min_parallel_table_scan_size",
        ):
            cursor.execute("SELECT set_config(%s, '0', true)", [setting])
        plans.hnsw_scan_configure(cursor, ef_search=params["ef_search"], order="relaxed_order")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(str(row[0]) for row in cursor.fetchall())

    assert "Gather" not in plan


def test_the_exact_paths_bound_grows_with_the_table_where_both_paths_read_alike():
    # sqrt(rows asked for * rows in the graph): the exact path reads M rows, the index about
    # dense_k * N / M of them.
    assert legs.filtered_exact_max_rows(1_100_000, 50) == 7417
    assert legs.filtered_exact_max_rows(4_000_000, 50) == 14143
    assert legs.filtered_exact_max_rows(10_000, 50) == legs.FILTERED_EXACT_MAX_ROWS  # the floor
    assert legs.filtered_exact_max_rows(-1, 50) == legs.FILTERED_EXACT_MAX_ROWS  # never analysed


def test_the_exact_path_switched_off_stays_off(monkeypatch):
    monkeypatch.setattr(legs, "FILTERED_EXACT_MAX_ROWS", 0)

    assert legs.filtered_exact_max_rows(1_100_000, 50) == 0


def test_the_columns_filters_read_stay_in_the_row_beside_its_vector(memories):
    """A metadata or tags filter checks again in the heap each row its GIN index names; a value
    moved out of line cost a TOAST lookup per condition per row. With the vector taking most of
    the row, the toaster moves the content out of line instead (migration memory 0020)."""
    memory = memories["slack deploy"]
    # Hex digits: pglz finds no repeats to shorten, so only moving a value out makes room.
    hexes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(20)]
    Memory.objects.filter(pk=memory.pk).update(
        content=" ".join(hexes * 4),
        embedding=[1.0] + [0.0] * 383,
        metadata={f"key{i}": value for i, value in enumerate(hexes[:8])},
        tags=[value[:24] for value in hexes[8:]],
    )

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_toast_chunk_id(metadata), pg_column_toast_chunk_id(tags),"
            " pg_column_toast_chunk_id(content) FROM memory_memory WHERE id = %s",
            [memory.pk],
        )
        metadata, tags, content = cursor.fetchone()

    assert (metadata, tags) == (None, None)
    assert content is not None  # the row was over the TOAST target: something had to go


def test_the_planner_estimates_a_filters_rows_among_the_agents(agent, no_embedder):
    """The estimate that sends a broad filter to the index first: from the columns' statistics,
    planned with the request's values, for this agent's rows."""
    memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(
                content=f"note {n}",
                session_id=f"s{n}",
                tags=["common"] if n % 2 else ["rare"] if n == 0 else [],
                occurred_at=DAY + timedelta(minutes=n),
            )
            for n in range(400)
        ],
        actor="system",
    )
    Memory.objects.filter(agent=agent).update(embedding=[1.0] + [0.0] * 383)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_memory")
    now = timezone.now()

    def expected(raw):
        filters = filter_parse(raw)
        params = {"tenant": agent.tenant_id, "agent": agent.pk, "now": now,
                  **CURRENTLY_VALID.params(), **filters.sql()[1]}  # fmt: skip
        with connection.cursor() as cursor:
            return legs.filter_rows_estimate(cursor, filters, params)

    assert 100 <= expected({"tags": "common"}) <= 300  # 200 rows
    assert expected({"tags": "rare"}) <= 20  # one row
    assert expected({"NOT": {"tags": "rare"}}) >= 300


# --- the metadata terms table (memory.search.models.MemoryMetadataTerm) --------------------------


def terms_of(memory) -> set[str]:
    return set(
        MemoryMetadataTerm.objects.filter(memory_id=memory.pk).values_list("term", flat=True)
    )


def unit(axis: int) -> list[float]:
    return [1.0 if i == axis else 0.0 for i in range(384)]


def test_a_searchable_memorys_text_and_boolean_values_are_its_terms(agent, memories):
    slack, call, bare = memories["slack deploy"], memories["call notes"], memories["no metadata"]
    assert terms_of(slack) == set()  # stored without a vector: never searched by one

    Memory.objects.filter(pk=slack.pk).update(embedding=unit(0))
    Memory.objects.filter(pk=call.pk).update(embedding=unit(1))
    Memory.objects.filter(pk=bare.pk).update(embedding=unit(2))

    # Numbers (5 = 5.0 in JSON) and nested values are left to the containment test.
    assert terms_of(slack) == {'"source""slack"'}
    assert terms_of(call) == {'"source""call"'}
    assert terms_of(bare) == set()
    Memory.objects.filter(pk=slack.pk).update(metadata={"source": "email", "urgent": True})
    assert terms_of(slack) == {'"source""email"', '"urgent"true'}
    Memory.objects.filter(pk=slack.pk).update(archived_at=timezone.now())
    assert terms_of(slack) == set()
    Memory.objects.filter(pk=slack.pk).update(archived_at=None)
    assert terms_of(slack) == {'"source""email"', '"urgent"true'}
    Memory.objects.filter(pk=slack.pk).delete()
    assert terms_of(slack) == set()


@pytest.mark.parametrize(
    ("raw", "documents"),
    [
        ({"metadata": {"source": "slack"}}, [{"source": "slack"}]),
        ({"metadata": {"source": {"in": ["a", "b"]}}}, [{"source": "a"}, {"source": "b"}]),
        ({"metadata": {"done": True}, "importance": {"gt": 0.5}}, [{"done": True}]),
        # Of two, the one naming fewer values.
        (
            {"metadata": {"source": {"in": ["a", "b"]}, "team": "x"}},
            [{"team": "x"}],
        ),
        ({"metadata": {"priority": 3}}, None),  # a number
        ({"metadata": {"thread": {"id": "t1"}}}, None),  # a nested key
        ({"metadata": {"source": {"ne": "a"}}}, None),
        ({"OR": [{"metadata": {"source": "a"}}, {"tags": "ops"}]}, None),
        ({"metadata": {"source": "x" * 1000}}, None),  # longer than a kept term
    ],
)
def test_a_filter_names_terms_only_where_they_keep_exactly_its_rows(raw, documents):
    terms = filter_parse(raw).metadata_terms()
    assert (terms and terms.documents) == documents


def test_the_rest_of_a_filter_is_checked_beside_its_terms():
    terms = filter_parse(
        {"metadata": {"source": {"in": ["a", "b"]}, "team": "x"}, "importance": {"gt": 0.5}}
    ).metadata_terms()
    assert terms is not None
    assert terms.rest == filter_parse(
        {"metadata": {"source": {"in": ["a", "b"]}}, "importance": {"gt": 0.5}}
    )
    alone = filter_parse({"metadata": {"team": "x"}}).metadata_terms()
    assert alone is not None
    assert alone.rest.root is None


@pytest.fixture
def large_agent(monkeypatch):
    """Searches take the large agent's filtered path, asking for one row at a time."""
    monkeypatch.setattr(plans, "EXACT_SCAN_MAX_MEMORIES", 0)
    monkeypatch.setattr(legs, "MEMORY_DENSE_CANDIDATES_NARROWED", 1)


def nearest_under(agent, raw) -> list[str]:
    outcome = memories_search(
        agent=agent,
        query="zzz",
        vector=unit(0),
        filters=filter_parse(raw),
        top_k=10,
        threshold=-1,
        now=timezone.now(),
        record_retrieval=False,
    )
    return [hit.content for hit in outcome.hits]


def test_a_selective_metadata_filter_is_answered_from_the_terms(agent, memories, large_agent):
    for axis, name in enumerate(["slack deploy", "doc draft", "email invoice"]):
        Memory.objects.filter(pk=memories[name].pk).update(embedding=unit(axis))
    named = {"metadata": {"source": {"in": ["slack", "doc"]}}}
    assert nearest_under(agent, named) == ["slack deploy"]

    # The terms decide which rows are read: without the nearest one's, the next answers.
    MemoryMetadataTerm.objects.filter(memory_id=memories["slack deploy"].pk).delete()
    assert nearest_under(agent, named) == ["doc draft"]
    # Should none of the rows the terms name pass the rest of the filter, every row of the
    # filter is read after all: the search never comes back short.
    assert nearest_under(agent, {**named, "importance": {"gt": 0.8}}) == ["slack deploy"]


def test_terms_match_any_text_as_the_containment_test_does(agent, memories, large_agent):
    odd = 'Zoë "quoted" \\ back\nslash\t☃'
    memory = memories["call notes"]
    Memory.objects.filter(pk=memory.pk).update(embedding=unit(0), metadata={"name": odd})
    assert nearest_under(agent, {"metadata": {"name": odd}}) == ["call notes"]
    assert nearest_under(agent, {"metadata": {"name": odd + " "}}) == []


def test_terms_naming_more_rows_than_the_exact_bound_go_to_the_index(
    agent, memories, large_agent, monkeypatch
):
    monkeypatch.setattr(legs, "filtered_exact_max_rows", lambda table_rows, dense_k: 2)
    for axis, memory in enumerate(memories.values()):
        Memory.objects.filter(pk=memory.pk).update(embedding=unit(axis))
    # Without the nearest row's terms, which path answered shows: the terms (the next row)
    # or the HNSW index, which reads the table (the nearest row).
    MemoryMetadataTerm.objects.filter(memory_id=memories["slack deploy"].pk).delete()
    names_two = {"metadata": {"source": {"in": ["slack", "doc"]}}}  # one row in the terms
    names_four = {"metadata": {"source": {"in": ["slack", "doc", "email", "call"]}}}  # three

    assert nearest_under(agent, names_two) == ["doc draft"]
    assert nearest_under(agent, names_four) == ["slack deploy"]


def test_two_conditions_on_values_read_the_terms_of_one_and_check_the_other(
    agent, memories, large_agent
):
    teams = {"slack deploy": "red", "doc draft": "red", "email invoice": "blue"}
    for axis, (name, team) in enumerate(teams.items()):
        source = memories[name].metadata["source"]
        Memory.objects.filter(pk=memories[name].pk).update(
            embedding=unit(axis), metadata={"source": source, "team": team}
        )
    red_not_slack = {"metadata": {"team": "red", "source": {"in": ["doc", "email"]}}}
    assert nearest_under(agent, red_not_slack) == ["doc draft"]


def test_a_differing_sign_counts_by_the_size_of_the_querys_value_there(db):
    """The weighted sketch distance of the terms path: the masks are in the sketch's bit order
    (a dimension whose sign differs counts 1 to 4, by the query's |value| / max |value|)."""
    query = [0.9, -0.5, 0.1, -0.3] + [0.01] * 380
    row = [-1.0, -1.0, -1.0, 1.0] + [1.0] * 380  # differs at the first, third and fourth
    low, high = legs.sketch_weight_masks(query)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT bit_count(x) + bit_count(x & %s::bit(384)) + 2 * bit_count(x & %s::bit(384))"
            " FROM (SELECT binary_quantize(%s::vector) # binary_quantize(%s::vector) AS x) AS d",
            [low, high, plans.vector_literal(row), plans.vector_literal(query)],
        )
        (distance,) = cursor.fetchone()
    assert distance == 4 + 1 + 2
