"""The keyword side of memory search: one full-text document per memory.

A memory's document is its own line, prefixed by its date and weighted A ("[8 May 2023] Caroline:
..."), plus up to two lines before and two after it in its session. Questions often name what a
neighbouring turn said (LoCoMo dev: R@10 0.68 -> 0.76 from this window alone, see
docs/retrieval-research.md), so a document changes when neighbours arrive, change or leave. The
memories a store writes get their documents before the insert, each with the others in view
(search_documents_for_new); any other insert gets one from a trigger (migration memory/0024). The
services below recompute exactly the other affected documents in the writer's transaction. The
weight tells a memory's own words from its neighbours' (search counts only its own as evidence
enough to pass the similarity threshold). The BM25 statistics follow through triggers (migration
memory/0004).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

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

# Up to two lines on one side of a new row n in its session, from `rows`: stored or new ones.
NEAREST_LINES = """
        (SELECT p.occurred_at, p.id,
                memory_search_line(p.metadata, p.speaker, p.role, p.content) AS line
         FROM {rows} AS p
         WHERE n.session_id <> '' AND p.tenant_id = n.tenant_id AND p.agent_id = n.agent_id
           AND p.session_id = n.session_id AND (p.occurred_at, p.id) {side} (n.occurred_at, n.id)
         ORDER BY p.occurred_at {order}, p.id {order} LIMIT 2)"""

# The two nearest of both kinds on that side, as one text in session order.
WINDOW_SIDE = """
CROSS JOIN LATERAL (
    SELECT string_agg(line, ' ' ORDER BY occurred_at, id) AS lines FROM (
        SELECT * FROM ({stored} UNION ALL {new}) AS nearer
        ORDER BY occurred_at {order}, id {order} LIMIT 2
    ) AS nearest
) AS {name}"""


def _window_side(name: str, side: str, order: str) -> str:
    return WINDOW_SIDE.format(
        name=name,
        order=order,
        stored=NEAREST_LINES.format(rows="memory_memory", side=side, order=order),
        new=NEAREST_LINES.format(rows="new_rows", side=side, order=order),
    )


# The documents of rows about to be inserted together, their ids already drawn from the table's
# sequence so their order in a session is final: each window is read from the stored rows and
# the other new rows of its session. The own line is memory_search_document's with no session
# (which reads no neighbours), so the line and its date are made in one place.
NEW_DOCUMENTS_SQL = f"""
WITH new_rows AS (
    SELECT * FROM unnest(%(tenants)s::bigint[], %(agents)s::bigint[], %(sessions)s::text[],
                         %(moments)s::timestamptz[], %(ids)s::bigint[], %(metadata)s::jsonb[],
                         %(speakers)s::text[], %(roles)s::text[], %(contents)s::text[])
        AS n(tenant_id, agent_id, session_id, occurred_at, id, metadata, speaker, role, content)
),
documents AS (
    SELECT n.id,
           memory_search_document(n.tenant_id, n.agent_id, '', n.occurred_at, n.id,
                                  n.metadata, n.speaker, n.role, n.content)
           || to_tsvector('english', concat_ws(' ', before.lines, after.lines)) AS document
    FROM new_rows AS n
    {_window_side("before", "<", "DESC")}
    {_window_side("after", ">", "ASC")}
)
SELECT id, document::text AS document, memory_search_length(document) AS length FROM documents
"""  # noqa: S608 (constant fragments; every value is a parameter)

IDS_RESERVE_SQL = (
    "SELECT nextval(pg_get_serial_sequence('memory_memory', 'id')) AS id"
    " FROM generate_series(1, %(count)s)"
)


class NewMemory(Protocol):
    """What a memory about to be inserted gives its keyword document (memory.models.Memory)."""

    pk: Any
    tenant_id: int
    agent_id: int
    session_id: str
    occurred_at: datetime
    metadata: dict[str, Any]
    speaker: str
    role: str
    content: str
    search_vector: Any
    search_length: int


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


def search_documents_for_new(rows: Sequence[NewMemory]) -> None:
    """Before these memories are inserted together: give each its id, drawn in their order from
    the table's sequence, and its document with the other new ones in view. Otherwise a new
    memory's document (the insert trigger's) would lack the batch-mates after it and be made
    again by an update, which enters the row in every index a second time, the HNSW graph
    included: most of a batch store's database time (docs/benchmarks.md)."""
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.execute(IDS_RESERVE_SQL, {"count": len(rows)})
        reserved = sorted(int(row.id) for row in rows_named(cursor))
        for memory, memory_id in zip(rows, reserved, strict=True):
            memory.pk = memory_id
        cursor.execute(
            NEW_DOCUMENTS_SQL,
            {
                "tenants": [memory.tenant_id for memory in rows],
                "agents": [memory.agent_id for memory in rows],
                "sessions": [memory.session_id for memory in rows],
                "moments": [memory.occurred_at for memory in rows],
                "ids": [memory.pk for memory in rows],
                "metadata": [json.dumps(memory.metadata) for memory in rows],
                "speakers": [memory.speaker for memory in rows],
                "roles": [memory.role for memory in rows],
                "contents": [memory.content for memory in rows],
            },
        )
        documents = {int(row.id): row for row in rows_named(cursor)}
    for memory in rows:
        made = documents[memory.pk]
        # The text form of a tsvector reads back as the same tsvector (psycopg sends a str as
        # of unknown type, which the column's type then parses).
        memory.search_vector = made.document
        memory.search_length = int(made.length)


def search_documents_refresh_after_insert(positions: Sequence[SessionPosition]) -> None:
    """After memories were inserted at these positions with their documents complete
    (search_documents_for_new): recompute the stored neighbours whose window now holds one."""
    new = {position[4] for position in positions}
    search_documents_refresh(sorted(session_neighbours(positions) - new))
