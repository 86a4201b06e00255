"""Reads of the memory app."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from ledger.models import Agent

# HNSW's candidate list while scanning. Filters (agent, tags, expiry) reject most of what the
# index offers; a wider list keeps recall@10 against exact search above 0.95 when they remove
# 90 % of the rows (bench/memory_scale.py: 0.85 at 40, 0.93 at 200, 0.97 at 400).
HNSW_EF_SEARCH = 400


def vector_literal(vector: Sequence[float]) -> str:
    """A vector as pgvector's text form, for a ``%s::vector`` parameter.

    psycopg adapts a Python list as a float8[] element by element, for every use of the
    parameter; a search binds its query vector several times, and the text form costs a
    fraction of that.
    """
    return "[" + ",".join(repr(float(value)) for value in vector) + "]"


NEAREST_SQL = """
SELECT id, embedding <=> %(vector)s::vector AS distance
FROM memory_memory
WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s
  AND embedding IS NOT NULL
  AND archived_at IS NULL
  AND (expires_at IS NULL OR expires_at > %(now)s)
ORDER BY embedding <=> %(vector)s::vector
LIMIT %(k)s
"""


def memories_nearest(
    *, agent: Agent, vector: Sequence[float], k: int, now: datetime | None = None
) -> list[tuple[int, float]]:
    """The ``k`` active memories of the agent nearest to ``vector``: (id, cosine distance).

    Served by the HNSW index with pgvector's iterative scans (0.8+), so the agent, expiry and
    archive filters never starve the result: the index keeps scanning until it has ``k`` rows
    that pass them, in exact distance order (``strict_order``).
    """
    moment = now or timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
        cursor.execute(
            "SELECT set_config('hnsw.ef_search', %s, true)", [str(max(HNSW_EF_SEARCH, 2 * k))]
        )
        cursor.execute(
            NEAREST_SQL,
            {
                "vector": vector_literal(vector),
                "tenant": agent.tenant_id,
                "agent": agent.pk,
                "now": moment,
                "k": k,
            },
        )
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]
