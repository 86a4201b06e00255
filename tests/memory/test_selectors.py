from __future__ import annotations

import random

import pytest
from django.db import connection

from memory.models import Memory
from memory.selectors import NEAREST_SQL, memories_nearest
from memory.services import MemoryDraft, memories_store

pytestmark = pytest.mark.django_db


def unit(rng: random.Random) -> list[float]:
    return normalised([rng.gauss(0, 1) for _ in range(384)])


def normalised(vector: list[float]) -> list[float]:
    norm = sum(v * v for v in vector) ** 0.5
    return [v / norm for v in vector]


def near(centre: list[float], spread: float, rng: random.Random) -> list[float]:
    """A unit vector about ``spread`` away from ``centre`` in a random direction."""
    return normalised([c + spread * n for c, n in zip(centre, unit(rng), strict=True)])


def test_the_index_returns_the_exact_top_k_when_filters_remove_most_rows(
    tenant, make_agent, no_embedder
):
    rng = random.Random(3)
    query = unit(rng)
    mine, crowd = make_agent(tenant, name="Creator1"), make_agent(tenant, name="Crowd")
    # Clustered like real embeddings (uniform random 384-d vectors are all equally far apart,
    # which no approximate index orders exactly). The crowd sits nearer the query than any of
    # the agent's own memories, so the first index candidates all fail the agent filter and
    # only the iterative scan reaches the agent's rows; theirs are at distinct distances.
    own = memories_store(
        agent=mine,
        drafts=[
            MemoryDraft(content=f"mine {i}", embedding=near(query, 0.8 + 0.1 * i, rng))
            for i in range(20)
        ],
        actor="x",
    )
    memories_store(
        agent=crowd,
        drafts=[
            MemoryDraft(content=f"other {i}", embedding=near(query, 0.5, rng)) for i in range(600)
        ],
        actor="x",
    )
    Memory.objects.filter(pk=own[0].pk).update(archived_at="2020-01-01T00:00:00Z")
    # On a table this small the planner would rather sort the agent's rows; switch the other
    # plans off so the HNSW index with iterative scans is what is under test (checked below).
    plans = ("enable_seqscan", "enable_sort", "enable_bitmapscan")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_memory")
        for plan in plans:
            cursor.execute(f"SET {plan} = off")
        try:
            found = memories_nearest(agent=mine, vector=query, k=5)
            cursor.execute(
                "EXPLAIN " + NEAREST_SQL,
                {"vector": query, "tenant": tenant.pk, "agent": mine.pk, "now": "now", "k": 5},
            )
            plan_text = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            for plan in plans:
                cursor.execute(f"SET {plan} = on")

    assert "memory_embedding_hnsw" in plan_text

    def distance(memory: Memory) -> float:
        return 1 - sum(a * b for a, b in zip(memory.embedding, query, strict=True))

    exact = sorted(own[1:], key=distance)[:5]
    assert [memory_id for memory_id, _ in found] == [m.pk for m in exact]
