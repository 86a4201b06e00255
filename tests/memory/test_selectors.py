from __future__ import annotations

import random
from typing import Any

import pytest
from django.db import connection

from memory.episodic.services import MemoryDraft, memories_store
from memory.models import Memory
from memory.search import plans as selectors
from memory.search.plans import nearest_sql
from memory.search.selectors import memories_nearest

pytestmark = pytest.mark.django_db


def unit(rng: random.Random) -> list[float]:
    return normalised([rng.gauss(0, 1) for _ in range(384)])


def normalised(vector: list[float]) -> list[float]:
    norm = sum(v * v for v in vector) ** 0.5
    return [v / norm for v in vector]


def agent_rows_and_crowd(tenant, make_agent):
    """An agent's 20 rows (the first archived) among 600 of another agent: the filter on the
    agent removes 97 % of the table."""
    rng = random.Random(3)
    query = unit(rng)
    mine, crowd = make_agent(tenant, name="Creator1"), make_agent(tenant, name="Crowd")
    own = memories_store(
        agent=mine,
        drafts=[MemoryDraft(content=f"mine {i}", embedding=unit(rng)) for i in range(20)],
        actor="x",
    )
    memories_store(
        agent=crowd,
        drafts=[MemoryDraft(content=f"other {i}", embedding=unit(rng)) for i in range(600)],
        actor="x",
    )
    Memory.objects.filter(pk=own[0].pk).update(archived_at="2020-01-01T00:00:00Z")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_memory")
    return mine, own, query


def plan_of(sql: str, params: dict[str, Any]) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def cosine_distance(memory: Memory, query: list[float]) -> float:
    return 1 - sum(a * b for a, b in zip(memory.embedding, query, strict=True))


def test_an_agent_with_few_memories_gets_the_exact_top_k_without_the_index(
    tenant, make_agent, no_embedder
):
    mine, own, query = agent_rows_and_crowd(tenant, make_agent)

    found = memories_nearest(agent=mine, vector=query, k=5)

    exact = sorted(own[1:], key=lambda memory: cosine_distance(memory, query))[:5]
    assert [memory_id for memory_id, _ in found] == [m.pk for m in exact]
    params = {"vector": query, "tenant": tenant.pk, "agent": mine.pk, "now": "now", "k": 5}
    assert "memory_embedding_hnsw" not in plan_of(nearest_sql(19), params)


# VACUUM (outside a transaction) sets the visibility map that index-only scans rely on, as
# autovacuum does on a live table.
@pytest.mark.django_db(transaction=True)
def test_a_small_agent_is_ranked_from_its_sign_bit_sketches_then_by_exact_distance(
    tenant, make_agent, no_embedder
):
    """1,000 memories, more than the sketch plan re-ranks (400): the nearest by Hamming distance
    between sign bits must still hold the exact top 10, which then come in exact order."""
    rng = random.Random(5)
    query = unit(rng)
    agent = make_agent(tenant, name="Creator1")
    near = [normalised([q + rng.gauss(0, 0.05) for q in query]) for _ in range(40)]
    far = [unit(rng) for _ in range(960)]
    stored = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(content=f"memory {i}", embedding=vector)
            for i, vector in enumerate(near + far)
        ],
        actor="x",
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE memory_memory")

    found = memories_nearest(agent=agent, vector=query, k=10)

    exact = sorted(stored, key=lambda memory: cosine_distance(memory, query))[:10]
    assert [memory_id for memory_id, _ in found] == [m.pk for m in exact]
    params = {"vector": query, "tenant": tenant.pk, "agent": agent.pk, "now": "now", "k": 10}
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # as on a table of millions of rows
        try:
            plan = plan_of(nearest_sql(1000), params)
        finally:
            cursor.execute("SET enable_seqscan = on")
    assert "Index Only Scan using memory_agent_sketch" in plan
    assert "memory_embedding_hnsw" not in plan


def test_the_index_scan_keeps_going_until_k_rows_pass_the_filters(
    tenant, make_agent, no_embedder, monkeypatch
):
    mine, own, query = agent_rows_and_crowd(tenant, make_agent)
    # The graph also holds entries of every earlier test's rolled-back rows, which autovacuum
    # may be repairing meanwhile; once in six CI runs the scan then found none of this agent's
    # rows. Rebuilt, it holds this test's rows only, as a vacuumed table's graph would.
    with connection.cursor() as cursor:
        cursor.execute("REINDEX INDEX memory_embedding_hnsw")
    # Every agent counts as large: the HNSW index with iterative scans is what is under test.
    monkeypatch.setattr(selectors, "EXACT_SCAN_MAX_MEMORIES", 0)
    # On a table this small the planner would rather sort the agent's rows; switch the other
    # plans off so the index is used (checked below).
    plans = ("enable_seqscan", "enable_sort", "enable_bitmapscan")
    with connection.cursor() as cursor:
        for plan in plans:
            cursor.execute(f"SET {plan} = off")
        try:
            found = memories_nearest(agent=mine, vector=query, k=5)
            params = {"vector": query, "tenant": tenant.pk, "agent": mine.pk, "now": "now", "k": 5}
            plan_text = plan_of(nearest_sql(20), params)
        finally:
            for plan in plans:
                cursor.execute(f"SET {plan} = on")

    assert "memory_embedding_hnsw" in plan_text
    # HNSW is approximate, so which five is not asserted; that the filter (97 % of the rows
    # are another agent's, one of mine archived) does not starve the scan, and the order, are.
    active = {m.pk: cosine_distance(m, query) for m in own[1:]}
    assert len(found) == 5
    assert all(memory_id in active for memory_id, _ in found)
    distances = [distance for _, distance in found]
    assert distances == sorted(distances)
    assert distances == pytest.approx([active[memory_id] for memory_id, _ in found], abs=1e-5)
