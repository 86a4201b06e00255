"""How a vector leg scans: exactly, through sign-bit sketches or through the HNSW index; its SQL.

Shared by every semantic read over a pgvector column: memory search, knowledge search, recall
and trust's dissent novelty."""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from functools import lru_cache
from typing import Any

from memory.episodic.validity import CURRENTLY_VALID_SQL

# HNSW's candidate list while scanning. Filters (agent, tags, expiry) reject most of what the
# index offers; the list must be wide enough to keep recall@10 against exact search above 0.95
# (bench/memory_scale.py, 2,000,000 memories, the graph built with ef_construction 128, 200
# queries: an agent owning half of them 0.875 / 0.914 / 0.954 / 0.960 at 40 / 100 / 200 / 400,
# for 2.1 / 2.6 / 3.1 / 3.8 ms; a tag keeping 10 % of its rows 0.982 with 50 rows from a list
# of 400, 0.975 with 40 from 800, in the same time: p50 9.7 / 9.0 ms, p95 13.0 / 13.3 over 600
# searches each, alternated). Narrower filters get a wider list (hnsw_ef_search), within these
# bounds.
HNSW_EF_SEARCH = 200
HNSW_EF_SEARCH_MAX = 400
# ef_search = this / the share of rows the filters keep, within the two bounds above.
HNSW_EF_SEARCH_PER_SHARE = 40


def hnsw_ef_search(share: float) -> int:
    """The candidate list for an index scan whose filters keep ``share`` of the indexed rows:
    the list must hold enough of them to rank well, and each entry costs distance work."""
    wanted = HNSW_EF_SEARCH_PER_SHARE / max(share, 1e-9)
    return int(min(HNSW_EF_SEARCH_MAX, max(HNSW_EF_SEARCH, math.ceil(wanted))))


def hnsw_scan_configure(cursor: Any, *, ef_search: int, order: str = "strict_order") -> None:
    """Session settings for an HNSW scan inside the current transaction: iterative scans, so
    filters that remove most rows never starve the result (the index scans on until it has the
    rows asked for; ``strict_order`` returns them in exact distance order, ``relaxed_order``
    nearly so, finding more of the true neighbours), the candidate list, and no parallel
    workers: a vector read returns a few hundred rows from at most a few thousand, and the
    gated index branch of a filtered leg (memory.search.legs.FILTERED_NEAREST), planned as a
    parallel scan when the filter is expected to keep few rows, started two workers for every
    search that then found their gate shut (26-34 ms against 9-13 ms without them, 300,000
    memories, load 4).

    Callers open ``transaction.atomic(savepoint=False)``: ``set_config(..., true)`` lasts to the
    end of the transaction whether or not a savepoint is released, so inside the request's
    transaction a savepoint would only cost two more statements per leg of a search."""
    cursor.execute(
        "SELECT set_config('hnsw.iterative_scan', %s, true),"
        " set_config('hnsw.ef_search', %s, true),"
        " set_config('max_parallel_workers_per_gather', '0', true)",
        [order, str(ef_search)],
    )


# An agent with at most this many memories is searched without the shared HNSW index. The
# index is one graph over every agent's vectors: when the agent owns a small share of them, an
# iterative scan walks most of the graph to collect its rows (138 ms for 10,000 of 400,000
# rows, and it stops at hnsw.max_scan_tuples before a 0.5 % share is found). Its own rows are
# read instead (SemanticPlan.SKETCH or SCAN), which is exact or nearly so, and fast.
EXACT_SCAN_MAX_MEMORIES = 20_000
# The sketch plan computes exact distances for this many times the rows asked for, at least
# SKETCH_MIN_CANDIDATES: the nearest by Hamming distance between sign bits.
SKETCH_OVERSAMPLE = 4
SKETCH_MIN_CANDIDATES = 400


class SemanticPlan(StrEnum):
    """How a nearest-memories query finds its rows."""

    # The HNSW index with iterative scans: a large agent.
    INDEX = "index"
    # The agent's sign-bit sketches, read from the covering index memory_agent_sketch without
    # touching the table, ranked by Hamming distance; the nearest few hundred rows are then
    # read and ranked by their exact distance. A small agent, no filter beyond the active ones.
    SKETCH = "sketch"
    # The agent's matching rows read and sorted by exact distance: a small agent under filters
    # the covering index cannot answer, or one session (a few dozen rows) of any agent.
    SCAN = "scan"


def semantic_plan(
    agent_memories: int, *, narrowed: bool = False, within_session: bool = False
) -> SemanticPlan:
    """The plan for a nearest-memories query of an agent with this many memories; ``narrowed``
    when filters beyond the agent and its active rows apply (tags, metadata, type)."""
    if within_session:
        return SemanticPlan.SCAN
    if agent_memories > EXACT_SCAN_MAX_MEMORIES:
        return SemanticPlan.INDEX
    return SemanticPlan.SCAN if narrowed else SemanticPlan.SKETCH


NEAREST_ROWS = """
SELECT id{distance} FROM memory_memory
WHERE {where} AND embedding IS NOT NULL
ORDER BY {order}
LIMIT %({limit})s"""
# The sketch's inner query reads only columns of memory_agent_sketch, so it is an index-only
# scan. Its outer order is written "+ 0" so the HNSW index cannot serve it (an exact sort).
NEAREST_BY_SKETCH = """
SELECT id{distance} FROM memory_memory
WHERE id = ANY(ARRAY(
    SELECT id FROM memory_memory
    WHERE {where} AND embedding_bits IS NOT NULL
    ORDER BY embedding_bits <~> binary_quantize(%(vector)s::vector)
    LIMIT greatest(%({limit})s * {oversample}, {minimum})
))
ORDER BY (embedding <=> %(vector)s::vector) + 0
LIMIT %({limit})s"""
DISTANCE = "embedding <=> %(vector)s::vector"


def cosine_similarity_sql(column: str, parameter: str = "vector") -> str:
    """SQL for 1 - cosine distance of ``column`` to %(<parameter>)s, NULL where it is undefined.

    pgvector answers NaN for a vector without a direction (all zeros; older installs stored
    them, see migration memory 0014), and a NaN score broke the ranking and the JSON answer
    (500). NULL reads as "no vector", which every caller already handles.
    """
    return f"1 - nullif({column} <=> %({parameter})s::vector, 'NaN'::float8)"


def nearest_rows_sql(
    where: str, plan: SemanticPlan, *, limit: str = "k", with_distance: bool = False
) -> str:
    """The ids (and cosine distances) of the rows matching ``where`` nearest to %(vector)s, at
    most %(<limit>)s of them, found by ``plan``."""
    distance = f", nullif({DISTANCE}, 'NaN'::float8) AS distance" if with_distance else ""
    if plan is SemanticPlan.SKETCH:
        return NEAREST_BY_SKETCH.format(
            distance=distance,
            where=where,
            limit=limit,
            oversample=SKETCH_OVERSAMPLE,
            minimum=SKETCH_MIN_CANDIDATES,
        )
    # "+ 0" makes the order an expression the HNSW index cannot serve, so the planner reads the
    # rows that pass the filters through a B-tree and sorts them: an exact scan.
    order = DISTANCE if plan is SemanticPlan.INDEX else f"({DISTANCE}) + 0"
    return NEAREST_ROWS.format(distance=distance, where=where, order=order, limit=limit)


def vector_literal(vector: Sequence[float]) -> str:
    """A vector as pgvector's text form, for a ``%s::vector`` parameter.

    psycopg adapts a Python list as a float8[] element by element, for every use of the
    parameter; a search binds its query vector several times, and the text form costs a
    fraction of that. A search's legs (memories, the ledger, the knowledge base) each bind the
    same query vector: the last few texts are kept, so it is written once (250 µs for 384
    values, against 11 µs to find it again).
    """
    return _vector_text(tuple(map(float, vector)))


@lru_cache(maxsize=8)
def _vector_text(values: tuple[float, ...]) -> str:
    return "[" + ",".join(map(repr, values)) + "]"


# The agent's memories that may be returned at all: not archived, not expired.
LIVE_ROWS = """tenant_id = %(tenant)s AND agent_id = %(agent)s AND archived_at IS NULL
  AND (expires_at IS NULL OR expires_at > %(now)s)"""
# ... and whose facts still hold (memory.episodic.validity): what a default read returns.
ACTIVE_ROWS = LIVE_ROWS + CURRENTLY_VALID_SQL


# ... and that began before a memory (consolidation's neighbours): earlier, or at the same time
# and stored before it. valid_from is in the sketch's covering index, so that plan stays
# index-only.
OLDER_ROWS = " AND (valid_from, id) < (%(before_from)s, %(before_id)s)"


def nearest_sql(agent_memories: int, *, older: bool = False) -> str:
    """The SQL memories_nearest runs for an agent with this many memories (``older``: only
    rows older than %(before_from)s / %(before_id)s)."""
    where = ACTIVE_ROWS + (OLDER_ROWS if older else "")
    return nearest_rows_sql(where, semantic_plan(agent_memories), with_distance=True)
