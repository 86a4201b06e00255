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


@pytest.mark.xfail(
    strict=False,
    reason="HNSW is approximate: on 620 synthetic rows the iterative scan now and then returns "
    "the agent's rows from further along (about 1 run in 15); the recall figures at scale are "
    "in bench/memory_scale.py",
)
def test_the_index_returns_the_exact_top_k_when_filters_remove_most_rows(
    tenant, make_agent, no_embedder
):
    rng = random.Random(3)
    query = unit(rng)
    mine, crowd = make_agent(tenant, name="Creator1"), make_agent(tenant, name="Crowd")
    # The agent's rows lie on one line away from the query, each the next one's nearest
    # neighbour, at distinct distances; the crowd (97 % of the rows) is scattered. Random 384-d
    # vectors are all about equally far apart, and an approximate index neither orders them
    # exactly nor always reaches a filtered few behind them, so only the agent's rows are
    # structured: what is under test is that the filter does not starve the index scan.
    away = unit(rng)
    own = memories_store(
        agent=mine,
        drafts=[
            MemoryDraft(
                content=f"mine {i}",
                embedding=normalised(
                    [q + (0.3 + 0.05 * i) * a for q, a in zip(query, away, strict=True)]
                ),
            )
            for i in range(20)
        ],
        actor="x",
    )
    memories_store(
        agent=crowd,
        drafts=[MemoryDraft(content=f"other {i}", embedding=unit(rng)) for i in range(600)],
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
