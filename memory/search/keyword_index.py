"""The keyword side of memory search: one full-text document per memory.

A memory's document is its own line, prefixed by its date and weighted A ("[8 May 2023] Caroline:
..."), plus up to two lines before and two after it in its session. Questions often name what a
neighbouring turn said (LoCoMo dev: R@10 0.68 -> 0.76 from this window alone, see
docs/retrieval-research.md), so a document changes when neighbours arrive, change or leave. A
memory gets its document as it is inserted (a trigger, migration memory/0024); the services below
recompute exactly the other affected documents in the writer's transaction. The weight tells a
memory's own words from its neighbours' (search counts only its own as evidence enough to pass
the similarity threshold). The BM25 statistics follow through triggers (migration memory/0004).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection

from config.sql import rows_named

# Each target's document from its window (memory_search_document, migration memory/0024). Rows
# another transaction holds (a lifecycle job archiving them, an update in flight) are skipped
# rather than waited for: this runs under the tenant's ledger lock, and waiting there for a row
# lock could deadlock with that holder. A skipped neighbour keeps its previous window, which
# still includes its own text.
REFRESH_SQL = """
WITH targets AS (
    SELECT id FROM memory_memory WHERE id = ANY(%(ids)s) ORDER BY id FOR UPDATE SKIP LOCKED
),
documents AS (
    SELECT m.id,
           memory_search_document(m.tenant_id, m.agent_id, m.session_id, m.occurred_at, m.id,
                                  m.metadata, m.speaker, m.role, m.content) AS tsv
    FROM targets JOIN memory_memory AS m USING (id)
)
UPDATE memory_memory AS m
SET search_vector = d.tsv, search_length = memory_search_length(d.tsv)
FROM documents AS d WHERE m.id = d.id
"""

# The rows whose window contains a given position of a session: two on each side of it.
# Positions without a session are left out before (session_neighbours).
NEIGHBOURS_SQL = """
SELECT DISTINCT n.id
FROM unnest(%(tenants)s::bigint[], %(agents)s::bigint[], %(sessions)s::text[],
            %(moments)s::timestamptz[], %(ids)s::bigint[])
     AS at_position(tenant_id, agent_id, session_id, occurred_at, id)
CROSS JOIN LATERAL (
    (SELECT p.id FROM memory_memory AS p
     WHERE p.tenant_id = at_position.tenant_id AND p.agent_id = at_position.agent_id
       AND p.session_id = at_position.session_id
       AND (p.occurred_at, p.id) < (at_position.occurred_at, at_position.id)
     ORDER BY p.occurred_at DESC, p.id DESC LIMIT 2)
    UNION ALL
    (SELECT p.id FROM memory_memory AS p
     WHERE p.tenant_id = at_position.tenant_id AND p.agent_id = at_position.agent_id
       AND p.session_id = at_position.session_id
       AND (p.occurred_at, p.id) > (at_position.occurred_at, at_position.id)
     ORDER BY p.occurred_at, p.id LIMIT 2)
) AS n
"""

SessionPosition = tuple[int, int, str, datetime, int]
"""Where a memory sits: (tenant id, agent id, session id, occurred at, memory id)."""


def session_neighbours(positions: Iterable[SessionPosition]) -> set[int]:
    """Ids of the memories within two places of these positions in their sessions."""
    # A memory without a session has no neighbours: no statement for it.
    rows = [position for position in positions if position[2]]
    if not rows:
        return set()
    columns = list(zip(*rows, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(
            NEIGHBOURS_SQL,
            {
                "tenants": list(columns[0]),
                "agents": list(columns[1]),
                "sessions": list(columns[2]),
                "moments": list(columns[3]),
                "ids": list(columns[4]),
            },
        )
        return {int(row.id) for row in rows_named(cursor)}


def search_documents_refresh(memory_ids: Sequence[int]) -> None:
    """Recompute the keyword documents of these memories from their current windows."""
    if not memory_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(REFRESH_SQL, {"ids": sorted(set(memory_ids))})


def search_documents_refresh_around(positions: Sequence[SessionPosition]) -> None:
    """After memories were written at these positions (edited or gone): recompute their own
    documents, where they still exist, and those of the neighbours whose window holds them."""
    own = [position[4] for position in positions]
    search_documents_refresh(sorted(session_neighbours(positions) | set(own)))


def search_documents_refresh_after_insert(positions: Sequence[SessionPosition]) -> None:
    """After memories were inserted at these positions: each got its document as it was
    inserted, so only the neighbours whose window now holds one are recomputed (among them any
    new memory beside another new one, which its insert may not have seen)."""
    search_documents_refresh(sorted(session_neighbours(positions)))
