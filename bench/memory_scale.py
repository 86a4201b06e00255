#!/usr/bin/env python3
"""Memory search at scale (issue 4): latency and filtered-vector recall over a million memories.

    python bench/memory_scale.py                                    # full: 1,000,000 + 100 x 10,000
    python bench/memory_scale.py --memories 20000 --agents 5 --per-agent 2000   # a few minutes

Data: one agent with ``--memories`` memories plus ``--agents`` agents with ``--per-agent`` each, in
one tenant, all synthetic: 384-d unit vectors drawn around ``--clusters`` random centres, and texts
of 8-30 made-up words drawn from a Zipf-like distribution over a ``--vocabulary``-word vocabulary,
a third of them from the topic words of the vector's cluster, so keyword and vector evidence
agree the way they do in real text. Sessions of 20 memories, a speaker per memory, and the tag
``flagged`` on one memory in ten (the filter that removes 90 %).

Loading, each step timed: the HNSW index is dropped; rows go in with binary COPY (psycopg) straight
into memory_memory with every NOT NULL column filled and search_vector NULL; the keyword documents
are computed by the service's own memory.search.keyword_index.search_documents_refresh on a sample
(its rate is printed and extrapolated) and by a set-based equivalent for the rest (same document,
checked on a sample; BM25 statistics rebuilt in one statement per table); VACUUM ANALYZE; then the
HNSW index is rebuilt from the model's definition (build time, pg_relation_size).

Measured, each over ``--queries`` queries after a warm-up:

* recall@10 against exact search (the same SQL with index scans off: a sequential scan) of
  memory.search.selectors.memories_nearest for the big agent (no filter) and for the small agents
  (the agent filter removes all but 1/(agents+1) of the rows), and of the search's semantic leg
  (memory.search.legs's SQL and row count, first 10) with the tag filter on the big agent
  (removes 90 %);
* the database part of a search: memory.search.legs.memory_candidates_query plus its SQL, run
  as the service runs it (p50/p95), per case;
* the whole search over HTTP (POST /api/v1/memories/search/, client round trip, and took_ms).

The small agents are the baseline measured in the same run: big/small ratios are printed.
Targets: p95 <= 20 ms (database), <= 50 ms (API), recall@10 >= 0.95.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
from _service import ApiClient, Stack, service_stack
from _setup import ROOT, bench_print, bench_summary, json_option_add, load_bar, percentile

Array: TypeAlias = "np.ndarray[Any, Any]"

DIMENSIONS = 384
SESSION_LENGTH = 20
WORDS_PER_MEMORY = (8, 30)
TOPIC_SHARE = 1 / 3
TOPIC_WORDS = 30
TOPIC_DIMENSIONS = 24
FLAG_TAG = "flagged"
FLAG_SHARE = 0.10
SPEAKERS = ("Avery", "Blake", "Casey", "Devon", "Emery", "Finley", "Harper", "Jordan")
CUSTOMERS = 1000
PRIORITIES = 10
CHANNELS = ("slack", "email", "call", "doc")
COPY_CHUNK = 50_000
KEYWORD_CHUNK_SESSIONS = 2_500  # 50,000 memories per set-based UPDATE
SERVICE_REFRESH_BATCH = 1_000
TARGET_DB_P95_MS = 20.0
TARGET_API_P95_MS = 50.0
TARGET_RECALL = 0.95
WARM_UP = 10
# --narrowed-variant: alternated rounds per setting.
COMPARE_ROUNDS = 4
SEMANTIC_LEG_ORDER = "relaxed_order"  # memory.search.legs', for the search's semantic leg
# --warm: every query of a case once, untimed, before the timed pass (steady state: the pages a
# case reads are in memory, as in a service that has been answering for a while).
WARM_EVERY_QUERY = False
NEAR_TIE = 0.01
EF_SEARCH_SWEEP = (40, 100, 200, 400)
K = 10

COPY_COLUMNS = (
    "tenant_id",
    "agent_id",
    "session_id",
    "role",
    "content",
    "memory_type",
    "importance",
    "embedding",
    "embedding_model",
    "content_hash",
    "metadata",
    "tags",
    "occurred_at",
    "valid_from",
    "created_at",
    "updated_at",
    "expires_at",
    "retrieval_count",
    "search_length",
    "speaker",
)
COPY_TYPES = (
    "int8",
    "int8",
    "varchar",
    "varchar",
    "text",
    "varchar",
    "float8",
    "vector",
    "varchar",
    "varchar",
    "jsonb",
    "varchar[]",
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "int4",
    "int4",
    "varchar",
)


def hnsw_scan_configure(cursor: Any, *, ef_search: int, order: str = "strict_order") -> None:
    """The service's own session settings for an HNSW scan (imported once Django is set up)."""
    from memory.search.plans import hnsw_scan_configure as configure

    configure(cursor, ef_search=ef_search, order=order)


def say(text: str) -> None:
    bench_print(f"[{time.strftime('%H:%M:%S')}] {text}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- synthetic data ----------------------------------------------------------------------------


class Synthetic:
    """Unit vectors around topics, each topic a low-dimensional patch of the sphere, and
    Zipf-distributed texts whose topic words follow the vector's topic.

    A vector is ``topic centre + 0.6 * (a point of the topic's own 24-d subspace) + 0.15 *
    (isotropic noise)``, normalised: neighbours within a topic are graded (cosine about 0.5-0.9)
    and other topics are far (about 0), like sentence embeddings, whose intrinsic dimension is
    low. Pure isotropic noise in 384 dimensions would make all neighbours of a query nearly tied
    and recall meaningless.
    """

    def __init__(self, *, clusters: int, vocabulary: list[str], seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        centres = self.rng.standard_normal((clusters, DIMENSIONS)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        self.bases = self.rng.standard_normal((clusters, DIMENSIONS, TOPIC_DIMENSIONS)).astype(
            np.float32
        ) / math.sqrt(DIMENSIONS)
        self.words = np.array(vocabulary, dtype=object)
        ranks = np.arange(1, len(vocabulary) + 1, dtype=np.float64)
        weights = 1.0 / (ranks + 2.7) ** 1.07  # Zipf-Mandelbrot, close to English word counts
        self.cdf = np.cumsum(weights / weights.sum())
        # Topic words: from the middle and the tail, so they are rarer than the common words.
        self.topics = self.rng.integers(200, len(vocabulary), size=(clusters, TOPIC_WORDS))

    def vectors(self, n: int) -> tuple[Array, Array]:
        cluster = self.rng.integers(len(self.centres), size=n)
        within = self.rng.standard_normal((n, TOPIC_DIMENSIONS)).astype(np.float32)
        within /= math.sqrt(TOPIC_DIMENSIONS)
        patch = np.empty((n, DIMENSIONS), dtype=np.float32)
        for start in range(0, n, 1000):  # bases of 1,000 rows at a time: 37 MB, not gigabytes
            part = slice(start, start + 1000)
            patch[part] = np.einsum("nij,nj->ni", self.bases[cluster[part]], within[part])
        noise = self.rng.standard_normal((n, DIMENSIONS)).astype(np.float32)
        vectors = self.centres[cluster] + 0.6 * patch + (0.15 / math.sqrt(DIMENSIONS)) * noise
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors, cluster

    def texts(self, cluster: Array, low: int, high: int) -> list[str]:
        lengths = self.rng.integers(low, high + 1, size=len(cluster))
        total = int(lengths.sum())
        common = np.searchsorted(self.cdf, self.rng.random(total))
        common = np.minimum(common, len(self.words) - 1)
        owner = np.repeat(cluster, lengths)
        topic = self.topics[owner, self.rng.integers(TOPIC_WORDS, size=total)]
        ids = np.where(self.rng.random(total) < TOPIC_SHARE, topic, common)
        words = self.words[ids]
        ends = np.cumsum(lengths)
        return [" ".join(words[end - n : end]) for end, n in zip(ends, lengths, strict=True)]


def made_up_vocabulary(size: int, seed: int) -> list[str]:
    """Pronounceable non-words (2-4 syllables), distinct, none an English stop word."""
    rng = np.random.default_rng(seed)
    onsets = [*"bdfgklmnprstvz", "br", "tr", "st", "ch", "sh", "pl", "gr", "kl"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < size:
        syllables = int(rng.integers(2, 5))
        word = "".join(
            onsets[int(rng.integers(len(onsets)))] + vowels[int(rng.integers(len(vowels)))]
            for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


# --- loading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentRows:
    id: int
    name: str
    count: int
    prefix: str  # session ids are f"{prefix}{number:07d}"


def raw_connection() -> Any:
    import psycopg
    from django.conf import settings
    from pgvector.psycopg import register_vector

    from config.embedded import OWNER_ROLE

    # The tables' owner: the bulk load switches a trigger off and rebuilds indexes.
    conn = psycopg.connect(**settings.EMBEDDED.connect_kwargs(OWNER_ROLE), autocommit=True)
    register_vector(conn)
    return conn


def check_copy_columns(conn: Any) -> None:
    """Fail early if the table gained a NOT NULL column without a default that COPY would miss."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'memory_memory' "
        "AND is_nullable = 'NO' AND column_default IS NULL AND is_identity = 'NO'"
    ).fetchall()
    missing = sorted({str(r[0]) for r in rows} - set(COPY_COLUMNS))
    if missing:
        raise SystemExit(f"memory_memory has NOT NULL columns this bench does not fill: {missing}")


def copy_rows(
    conn: Any, synthetic: Synthetic, tenant_id: int, agent: AgentRows, model: str, bar: Any
) -> float:
    """COPY the agent's memories in chunks; returns the seconds spent in COPY itself."""
    from memory.episodic import policies

    columns = ", ".join(COPY_COLUMNS)
    created = datetime.now(UTC)
    expires = policies.expires_at_default(memory_type=policies.CONVERSATION, created_at=created)
    start = DATA_START
    copy_seconds = 0.0
    written = 0
    while written < agent.count:
        n = min(COPY_CHUNK, agent.count - written)
        vectors, cluster = synthetic.vectors(n)
        texts = synthetic.texts(cluster, *WORDS_PER_MEMORY)
        flags = synthetic.rng.random(n) < FLAG_SHARE
        speakers = synthetic.rng.integers(len(SPEAKERS), size=n)
        importance = synthetic.rng.random(n)
        customers = synthetic.rng.integers(CUSTOMERS, size=n)
        priorities = synthetic.rng.integers(PRIORITIES, size=n)
        channels = synthetic.rng.integers(len(CHANNELS), size=n)
        rows = []
        for i in range(n):
            number = written + i
            rows.append(
                (
                    tenant_id,
                    agent.id,
                    f"{agent.prefix}{number // SESSION_LENGTH:07d}",
                    "user",
                    texts[i],
                    policies.CONVERSATION,
                    float(importance[i]),
                    vectors[i],
                    model,
                    policies.content_hash(texts[i]),
                    # The object itself: COPY's jsonb dumper encodes whatever it is given, so
                    # a json.dumps string would be stored as a JSON string, not an object.
                    {
                        "speaker": SPEAKERS[speakers[i]],
                        "n": number,
                        # For the filtered cases: a key on 0.1 % of rows, a number, a category.
                        "customer": f"c{customers[i]:04d}",
                        "priority": int(priorities[i]),
                        "channel": CHANNELS[channels[i]],
                    },
                    [FLAG_TAG] if flags[i] else [],
                    start + timedelta(minutes=number),
                    # valid_from defaults to occurred_at, as memory.episodic.services stores it.
                    start + timedelta(minutes=number),
                    created,
                    created,
                    expires,
                    0,
                    0,
                    # Blank, as for a client that names the speaker in the metadata.
                    "",
                )
            )
        started = time.perf_counter()
        statement = f"COPY memory_memory ({columns}) FROM STDIN WITH (FORMAT BINARY)"
        with conn.transaction(), conn.cursor() as cursor, cursor.copy(statement) as copy:
            copy.set_types(list(COPY_TYPES))
            for row in rows:
                copy.write_row(row)
        copy_seconds += time.perf_counter() - started
        written += n
        bar.update(n)
    return copy_seconds


# The keyword document of memory.search.keyword_index.REFRESH_SQL (its own dated line weighted A,
# then the two lines before and after it in its session), for one agent's range of sessions at
# once: the neighbours come from window functions instead of two index lookups per row. Chunks are
# whole sessions, so no window crosses a chunk's edge. check_documents() compares the two on a
# sample, so a change to the service's document shows up here as a mismatch.
SET_BASED_DOCUMENTS_SQL = """
WITH lines AS (
    SELECT id, tenant_id, agent_id, session_id, occurred_at,
           memory_search_line(metadata, speaker, role, content) AS line
    FROM memory_memory
    WHERE agent_id = %(agent)s AND session_id >= %(low)s AND session_id < %(high)s
),
windows AS (
    SELECT id, occurred_at, line,
           CASE WHEN session_id = '' THEN NULL
                ELSE concat_ws(' ', lag(line, 2) OVER s, lag(line, 1) OVER s,
                               lead(line, 1) OVER s, lead(line, 2) OVER s) END AS around
    FROM lines
    WINDOW s AS (PARTITION BY tenant_id, agent_id, session_id ORDER BY occurred_at, id)
),
documents AS (
    SELECT id,
        setweight(to_tsvector('english',
            '[' || to_char(occurred_at AT TIME ZONE 'UTC', 'FMDD FMMonth YYYY') || '] '
            || line), 'A')
        || to_tsvector('english', coalesce(around, '')) AS tsv
    FROM windows
)
UPDATE memory_memory AS m
SET search_vector = d.tsv,
    search_length = (SELECT coalesce(sum(array_length(u.positions, 1)), 0) FROM unnest(d.tsv) AS u)
FROM documents AS d WHERE m.id = d.id
"""

STATS_REBUILD_SQL = (
    "DELETE FROM memory_memoryterm WHERE agent_id = ANY(%(agents)s)",
    """INSERT INTO memory_memoryterm (agent_id, lexeme, df)
       SELECT agent_id, u.lexeme, count(*) FROM memory_memory, unnest(search_vector) AS u
       WHERE agent_id = ANY(%(agents)s) AND search_vector IS NOT NULL GROUP BY 1, 2""",
    "DELETE FROM memory_memorysearchtotals WHERE agent_id = ANY(%(agents)s)",
    """INSERT INTO memory_memorysearchtotals (agent_id, documents, positions)
       SELECT agent_id, count(*), sum(search_length) FROM memory_memory
       WHERE agent_id = ANY(%(agents)s) AND search_vector IS NOT NULL GROUP BY 1""",
)


def keyword_documents_service(agent: AgentRows, rows: int) -> tuple[int, float]:
    """The service's refresh over the agent's first ``rows`` memories, in batches; the trigger
    keeps the BM25 statistics. Returns (rows, seconds)."""
    from django.db import transaction

    from memory.models import Memory
    from memory.search.keyword_index import search_documents_refresh

    ids = list(
        Memory.objects.filter(agent_id=agent.id).order_by("id").values_list("id", flat=True)[:rows]
    )
    started = time.perf_counter()
    with load_bar(total=len(ids), description="keyword documents (service)") as bar:
        for offset in range(0, len(ids), SERVICE_REFRESH_BATCH):
            with transaction.atomic():
                search_documents_refresh(ids[offset : offset + SERVICE_REFRESH_BATCH])
            bar.update(len(ids[offset : offset + SERVICE_REFRESH_BATCH]))
    return len(ids), time.perf_counter() - started


def keyword_documents_set_based(conn: Any, agents: Sequence[AgentRows]) -> float:
    """Every agent's documents with window functions, statistics rebuilt once; returns seconds.

    The statistics trigger is off meanwhile: per statement it would fold each changed row's old
    and new tsvector into one jsonb value, then apply them lexeme by lexeme.
    """
    started = time.perf_counter()
    conn.execute("ALTER TABLE memory_memory DISABLE TRIGGER memory_search_stats_update")
    bar = load_bar(total=sum(a.count for a in agents), description="keyword documents (set)")
    try:
        for agent in agents:
            sessions = math.ceil(agent.count / SESSION_LENGTH)
            for low in range(0, sessions, KEYWORD_CHUNK_SESSIONS):
                high = low + KEYWORD_CHUNK_SESSIONS
                conn.execute(
                    SET_BASED_DOCUMENTS_SQL,
                    {
                        "agent": agent.id,
                        "low": f"{agent.prefix}{low:07d}",
                        "high": f"{agent.prefix}{high:07d}",
                    },
                )
                bar.update(min(high * SESSION_LENGTH, agent.count) - low * SESSION_LENGTH)
    finally:
        bar.close()
        conn.execute("ALTER TABLE memory_memory ENABLE TRIGGER memory_search_stats_update")
    with conn.transaction():
        for statement in STATS_REBUILD_SQL:
            conn.execute(statement, {"agents": [a.id for a in agents]})
    return time.perf_counter() - started


def check_documents(conn: Any, sample: int, seed: int) -> tuple[int, int]:
    """Recompute a random sample with the service's refresh and count identical documents."""
    from django.db import transaction

    from memory.search.keyword_index import search_documents_refresh

    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM memory_memory ORDER BY hashint8(id # %s::bigint) LIMIT %s",
            [seed, sample],
        ).fetchall()
    ]
    before = dict(
        conn.execute(
            "SELECT id, search_vector::text FROM memory_memory WHERE id = ANY(%s)", [ids]
        ).fetchall()
    )
    with transaction.atomic():
        search_documents_refresh(ids)
    after = dict(
        conn.execute(
            "SELECT id, search_vector::text FROM memory_memory WHERE id = ANY(%s)", [ids]
        ).fetchall()
    )
    return sum(before[i] == after[i] for i in ids), len(ids)


def hnsw_index() -> Any:
    from memory.models import Memory

    return next(i for i in Memory._meta.indexes if i.name == "memory_embedding_hnsw")


def hnsw_rebuild(conn: Any, maintenance_work_mem: str) -> tuple[float, int]:
    """Create the model's HNSW index on the loaded table; returns (seconds, bytes)."""
    from django.db import connection

    from memory.models import Memory

    index = hnsw_index()
    with connection.schema_editor(collect_sql=True) as editor:
        sql = str(index.create_sql(Memory, editor))
    conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", [maintenance_work_mem])
    started = time.perf_counter()
    conn.execute(sql)
    seconds = time.perf_counter() - started
    size = conn.execute("SELECT pg_relation_size('memory_embedding_hnsw')").fetchone()[0]
    return seconds, int(size)


# --- measuring ---------------------------------------------------------------------------------


@dataclass
class Query:
    agent: AgentRows
    text: str
    vector: list[float]
    agent_tenant: int = 0


Neighbours: TypeAlias = list[tuple[int, float]]  # (memory id, cosine distance), nearest first


def exact_neighbours(conn: Any, sql: str, params: dict[str, Any]) -> Neighbours:
    """The rows ``sql`` returns with the index scans off (HNSW is only ever an index scan, so
    this is the exact answer), each with its distance to the query."""
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        ids = [int(r[0]) for r in conn.execute(sql, params).fetchall()]
    return with_distances(conn, ids, params["vector"])


def with_distances(conn: Any, ids: Sequence[int], vector: Sequence[float] | str) -> Neighbours:
    """``vector`` as floats, or already in pgvector's text form (as the service binds it)."""
    literal = vector if isinstance(vector, str) else "[" + ",".join(map(str, vector)) + "]"
    rows = conn.execute(
        "SELECT id, embedding <=> %s::vector FROM memory_memory WHERE id = ANY(%s)",
        [literal, list(ids)],
    ).fetchall()
    distance = {int(r[0]): float(r[1]) for r in rows}
    return [(i, distance[i]) for i in ids]


@dataclass
class Recall:
    """recall@10 against exact search: strict (the target), and with near-ties forgiven (a
    returned row counts if it is no farther than the 10th exact one plus 1 %, ann-benchmarks'
    convention), which tells misses among equally distant rows from real misses."""

    strict: list[float]
    tolerant: list[float]

    def line(self) -> str:
        mean = statistics.mean(self.strict)
        return (
            f"recall@{K} mean {mean:.3f} (min {min(self.strict):.1f}), near-ties forgiven "
            f"{statistics.mean(self.tolerant):.3f}; target >= {TARGET_RECALL}: "
            f"{verdict(mean >= TARGET_RECALL)}"
        )


def recall_of(found: Neighbours, exact: Neighbours) -> tuple[float, float]:
    wanted = min(K, len(exact))
    if not wanted:
        return 1.0, 1.0
    strict = len({i for i, _ in found[:K]} & {i for i, _ in exact[:K]}) / wanted
    limit = exact[wanted - 1][1] * (1 + NEAR_TIE)
    tolerant = min(wanted, sum(d <= limit for _, d in found[:K])) / wanted
    return strict, tolerant


def nearest_params(q: Query, tenant_id: int) -> dict[str, Any]:
    from django.utils import timezone

    return {"vector": q.vector, "tenant": tenant_id, "agent": q.agent.id, "now": timezone.now(),
            "k": K}  # fmt: skip


def recall_of_selector(
    conn: Any, queries: Sequence[Query], tenant_id: int
) -> tuple[Recall, list[float], list[Neighbours]]:
    """memories_nearest against the same SQL without the index: recall, latency (ms) and the
    exact answers (for the ef_search sweep)."""
    from ledger.models import Agent
    from memory.search.plans import ACTIVE_ROWS, SemanticPlan, nearest_rows_sql
    from memory.search.selectors import memories_nearest

    agents = {q.agent.id: Agent.objects.get(pk=q.agent.id) for q in queries}
    result = Recall([], [])
    latency: list[float] = []
    exact_answers = []
    exact_sql = nearest_rows_sql(ACTIVE_ROWS, SemanticPlan.SCAN, with_distance=True)
    for q in queries:
        started = time.perf_counter()
        found = memories_nearest(agent=agents[q.agent.id], vector=q.vector, k=K)
        latency.append((time.perf_counter() - started) * 1000)
        exact = exact_neighbours(conn, exact_sql, nearest_params(q, tenant_id))
        exact_answers.append(exact)
        strict, tolerant = recall_of(found, exact)
        result.strict.append(strict)
        result.tolerant.append(tolerant)
    return result, latency, exact_answers


def ef_search_sweep(
    queries: Sequence[Query], exact: Sequence[Neighbours], tenant_id: int
) -> list[tuple[str, Recall, list[float]]]:
    """The selector's index path at hnsw.ef_search values (the baseline of the exact scan that
    small agents get), through Django's connection like the selector."""
    from django.db import connection, transaction

    from memory.search.plans import ACTIVE_ROWS, SemanticPlan, nearest_rows_sql

    index_sql = nearest_rows_sql(ACTIVE_ROWS, SemanticPlan.INDEX, with_distance=True)
    rows = []
    for ef in EF_SEARCH_SWEEP:
        result = Recall([], [])
        latency = []
        for q, answer in zip(queries, exact, strict=True):
            with transaction.atomic(), connection.cursor() as cursor:
                hnsw_scan_configure(cursor, ef_search=ef)
                started = time.perf_counter()
                cursor.execute(index_sql, nearest_params(q, tenant_id))
                found = [(int(i), float(d)) for i, d in cursor.fetchall()]
                latency.append((time.perf_counter() - started) * 1000)
            strict, tolerant = recall_of(found, answer)
            result.strict.append(strict)
            result.tolerant.append(tolerant)
        rows.append((f"ef_search {ef}", result, latency))
    return rows


def hnsw_share(sql: str, queries: Sequence[Query], params_of: Callable[[Query], Any]) -> str:
    """How the planner serves these queries: the HNSW index, the sign-bit sketches of the
    covering index, or else a scan of the agent's rows."""
    from django.db import connection, transaction

    hnsw = sketch = 0
    for q in queries:
        with transaction.atomic(), connection.cursor() as cursor:
            params = params_of(q)
            hnsw_scan_configure(cursor, ef_search=params.get("ef_search", 400))
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(str(r[0]) for r in cursor.fetchall())
        hnsw += "memory_embedding_hnsw" in plan
        sketch += "memory_agent_sketch" in plan
    scan = len(queries) - hnsw - sketch
    return f"plans: HNSW {hnsw}, sign-bit sketches {sketch}, row scan {scan} of {len(queries)}"


def dense_leg_sql(filters: Any, agent_memories: int, params: dict[str, Any] | None = None) -> str:
    """The search's semantic leg as the service builds it for an agent of this size; with the
    search's ``params``, a large agent's filtered leg as chosen for them (the exact path's bound
    for this table, the index first when the planner expects many rows)."""
    from django.db import connection

    from memory.search import legs as search

    if params is None:
        return search.dense_leg_sql(agent_memories, filters)
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'memory_memory'::regclass")
        (table_rows,) = cursor.fetchone()
    # The query vector as the search bound it (pgvector's text form is a JSON array).
    vector = json.loads(params["vector"])
    plan = search.filtered_plan(agent_memories, filters, float(table_rows), params, vector)
    return search.dense_leg_sql(agent_memories, filters, **plan)


def recall_of_dense_leg(conn: Any, queries: Sequence[Query], filters: Any) -> Recall:
    """The search's semantic leg (its SQL, session settings and row count: 100, or 40 under a
    narrowing filter), its 10 nearest against exact."""
    from django.db import connection, transaction
    from django.utils import timezone

    from ledger.models import Agent
    from memory.search import legs as search

    result = Recall([], [])
    for q in queries:
        agent = Agent.objects.get(pk=q.agent.id)
        _, params = search.memory_candidates_query(
            agent=agent, query=q.text, vector=q.vector, filters=filters, now=timezone.now()
        )
        sql = dense_leg_sql(filters, q.agent.count, params)
        with transaction.atomic(), connection.cursor() as cursor:
            hnsw_scan_configure(cursor, ef_search=params["ef_search"], order=SEMANTIC_LEG_ORDER)
            cursor.execute(sql, params)
            found = [int(r[0]) for r in cursor.fetchall()]
        # The service ranks the leg's candidates by their exact cosine afterwards.
        nearest = sorted(with_distances(conn, found, q.vector), key=lambda pair: pair[1])[:K]
        strict, tolerant = recall_of(nearest, exact_neighbours(conn, sql, params))
        result.strict.append(strict)
        result.tolerant.append(tolerant)
    return result


def time_candidates_sql(queries: Sequence[Query], filters: Any) -> list[float]:
    """The database part of a search, as memory.search.legs runs it: the statistics query
    inside memory_candidates_query, then the candidate SQL under the same session settings."""
    from django.db import connection, transaction
    from django.utils import timezone

    from ledger.models import Agent
    from memory.search import legs as search

    agents = {q.agent.id: Agent.objects.get(pk=q.agent.id) for q in queries}
    latency = []
    warm = list(queries) if WARM_EVERY_QUERY else list(queries[:WARM_UP])
    for number, q in enumerate([*warm, *queries]):
        started = time.perf_counter()
        sql, params = search.memory_candidates_query(
            agent=agents[q.agent.id], query=q.text, vector=q.vector, filters=filters,
            now=timezone.now(),
        )  # fmt: skip
        with transaction.atomic(), connection.cursor() as cursor:
            hnsw_scan_configure(cursor, ef_search=params["ef_search"], order=SEMANTIC_LEG_ORDER)
            cursor.execute(sql, params)
            cursor.fetchall()
        if number >= len(warm):
            latency.append((time.perf_counter() - started) * 1000)
    return latency


@contextlib.contextmanager
def narrowed_settings(rows: int, ceiling: int) -> Iterator[None]:
    """The service with another row count and ef_search ceiling for narrowed HNSW searches."""
    from memory.search import legs as search
    from memory.search import plans as selectors

    saved = search.MEMORY_DENSE_CANDIDATES_NARROWED, selectors.HNSW_EF_SEARCH_MAX
    search.MEMORY_DENSE_CANDIDATES_NARROWED, selectors.HNSW_EF_SEARCH_MAX = rows, ceiling
    try:
        yield
    finally:
        search.MEMORY_DENSE_CANDIDATES_NARROWED, selectors.HNSW_EF_SEARCH_MAX = saved


def compare_narrowed(
    conn: Any, queries: Sequence[Query], filters: Any, variant: tuple[int, int], *, recall: bool
) -> None:
    """The tag filter's database part with the service's settings and with ``variant`` (rows,
    ef_search ceiling), in alternated rounds so the machine's noise falls on both alike."""
    from memory.search import legs as search
    from memory.search import plans as selectors

    service = (search.MEMORY_DENSE_CANDIDATES_NARROWED, selectors.HNSW_EF_SEARCH_MAX)
    times: dict[tuple[int, int], list[float]] = {service: [], variant: []}
    for round_number in range(COMPARE_ROUNDS):
        order = [service, variant] if round_number % 2 == 0 else [variant, service]
        for settings in order:
            with narrowed_settings(*settings):
                times[settings] += time_candidates_sql(queries, filters)
    for (rows, ceiling), values in times.items():
        line = f"  {rows} rows, ef_search <= {ceiling}: {spread(values)} ms over {len(values)}"
        if recall:
            with narrowed_settings(rows, ceiling):
                line += f"; {recall_of_dense_leg(conn, queries, filters).line()}"
        print(line)


def time_legs(queries: Sequence[Query], filters: Any) -> dict[str, list[float]]:
    """Where the database time goes: each part of the search's SQL run alone (ms per query),
    plus how many rows the keyword leg fetches."""
    from django.db import connection, transaction
    from django.utils import timezone

    from ledger.models import Agent
    from memory.search import legs as search

    parts = {
        "statistics query": search.LEXEME_STATS_SQL,
        "semantic leg": dense_leg_sql(filters, queries[0].agent.count),
        "keyword leg": search.keyword_leg_sql(filters),
    }
    timings: dict[str, list[float]] = {name: [] for name in parts}
    timings["keyword rows"] = []
    for q in queries:
        agent = Agent.objects.get(pk=q.agent.id)
        _, params = search.memory_candidates_query(
            agent=agent, query=q.text, vector=q.vector, filters=filters, now=timezone.now()
        )
        params = {**params, "query": q.text}
        for name, sql in parts.items():
            if name == "keyword leg" and not params["agent_lexemes"]:  # skipped: common words
                timings[name].append(0.0)
                timings["keyword rows"].append(0)
                continue
            with transaction.atomic(), connection.cursor() as cursor:
                hnsw_scan_configure(cursor, ef_search=params["ef_search"], order=SEMANTIC_LEG_ORDER)
                started = time.perf_counter()
                cursor.execute(sql, params)
                rows = cursor.fetchall()
                timings[name].append((time.perf_counter() - started) * 1000)
            if name == "keyword leg":
                timings["keyword rows"].append(len(rows))
    return timings


def explain_candidates_sql(query: Query, filters: Any) -> list[str]:
    from django.db import connection, transaction
    from django.utils import timezone

    from ledger.models import Agent
    from memory.search import legs as search

    agent = Agent.objects.get(pk=query.agent.id)
    sql, params = search.memory_candidates_query(
        agent=agent, query=query.text, vector=query.vector, filters=filters, now=timezone.now()
    )
    with transaction.atomic(), connection.cursor() as cursor:
        hnsw_scan_configure(cursor, ef_search=params["ef_search"], order=SEMANTIC_LEG_ORDER)
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        lines = [str(r[0]) for r in cursor.fetchall()]
    # The query vector is printed in full in every node that uses it.
    return [line if len(line) < 300 else line[:200] + " ..." for line in lines]


def time_api(
    api: ApiClient, queries: Sequence[Query], *, send_vector: bool
) -> tuple[list[float], list[float], list[int]]:
    """POST /api/v1/memories/search/ per query: the client's round trip, the server's took_ms
    and the candidates ranked. With ``send_vector`` the request carries the query's synthetic
    vector (the service embeds nothing); without, the service embeds the made-up words."""
    client, server, candidates = [], [], []
    warm = list(queries) if WARM_EVERY_QUERY else list(queries[:WARM_UP])
    for number, q in enumerate([*warm, *queries]):
        request: dict[str, Any] = {"agent": q.agent.name, "query": q.text, "top_k": K}
        if send_vector:
            request["embedding"] = q.vector
        status, body, elapsed = api.post("/api/v1/memories/search/", request)
        if status != 200:
            raise SystemExit(f"search: HTTP {status}: {body}")
        if number >= len(warm):
            client.append(elapsed)
            server.append(float(body["took_ms"]))
            candidates.append(int(body.get("candidates", -1)))
    return client, server, candidates


def time_query_embedding(texts: Sequence[str]) -> list[float]:
    from memory.embeddings.backends import embed_query

    latency = []
    for number, text in enumerate([*texts[:WARM_UP], *texts]):
        started = time.perf_counter()
        embed_query(text)
        if number >= WARM_UP:
            latency.append((time.perf_counter() - started) * 1000)
    return latency


def spread(values: Sequence[float]) -> str:
    return (
        f"p50 {statistics.median(values):7.1f}  p95 {percentile(list(values), 0.95):7.1f}  "
        f"max {max(values):7.1f}"
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


@contextlib.contextmanager
def step(name: str) -> Iterator[Callable[[], float]]:
    started = time.perf_counter()
    say(f"{name} ...")
    yield lambda: time.perf_counter() - started
    say(f"{name}: {time.perf_counter() - started:.1f} s")


# --- main --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=1_000_000, help="memories of the big agent")
    parser.add_argument("--agents", type=int, default=100, help="small agents")
    parser.add_argument("--per-agent", type=int, default=10_000, help="memories per small agent")
    parser.add_argument("--queries", type=int, default=200, help="queries per measurement")
    parser.add_argument("--clusters", type=int, default=1_000, help="topics")
    parser.add_argument("--vocabulary", type=int, default=50_000)
    parser.add_argument(
        "--service-sample",
        type=int,
        default=20_000,
        help="memories whose keyword documents the service's refresh computes",
    )
    parser.add_argument(
        "--check-sample",
        type=int,
        default=500,
        help="set-based documents compared with the service's",
    )
    parser.add_argument("--maintenance-work-mem", default="2GB", help="for the HNSW build")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--explain", action="store_true", help="print one query plan per case")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "var" / "bench-memory-scale")
    parser.add_argument("--keep", action="store_true", help="keep the data folder afterwards")
    parser.add_argument(
        "--warm", action="store_true", help="run every query once untimed before timing"
    )
    parser.add_argument(
        "--skip-recall", action="store_true", help="latency only (recall needs exact scans)"
    )
    parser.add_argument(
        "--narrowed-variant",
        metavar="ROWS:CEILING",
        help="also time the tag filter with another row count and ef_search ceiling, e.g. 40:800",
    )
    parser.add_argument(
        "--filtered",
        action="store_true",
        help="only the filtered cases (filter language, issue 22) over the big agent",
    )
    parser.add_argument(
        "--skip-baseline",
        action="store_true",
        help="with --filtered, no straight-to-HNSW comparison (a selective filter's walk of the "
        "graph takes seconds per query)",
    )
    parser.add_argument(
        "--cases",
        metavar="TEXT",
        help="with --filtered, only the cases whose label contains TEXT (case-insensitive; "
        "several texts separated by commas)",
    )
    parser.add_argument(
        "--load-only", action="store_true", help="load the data (with --keep) and stop"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure the data an earlier --keep run left in --data-dir, if its sizes match",
    )
    json_option_add(parser)
    args = parser.parse_args()  # fmt: skip

    with bench_summary(as_json=args.json, name="memory_scale") as summary:
        say(
            f"{args.memories:,} memories of one agent + {args.agents} agents x "
            f"{args.per_agent:,}; load average {load_average()}; cpus {os.cpu_count()}"
        )
        summary["load_average_before"] = load_average()
        with service_stack(args.data_dir, workers=1, keep=args.keep or args.reuse) as stack:
            run(stack, args, summary)
        say(f"done; load average {load_average()}")
        summary["load_average_after"] = load_average()


def load_dataset(
    conn: Any, args: argparse.Namespace, tenant: Any, synthetic: Synthetic, summary: dict[str, Any]
) -> list[AgentRows]:
    """Agents, memories (COPY), keyword documents and the HNSW index, each step timed."""
    from ledger.services import agent_create
    from memory.embeddings.backends import embedder_name

    big = agent_create(tenant=tenant, name="scale-big", actor="system")
    agents = [AgentRows(big.pk, big.name, args.memories, "big-")]
    for number in range(args.agents):
        small = agent_create(tenant=tenant, name=f"scale-{number:03d}", actor="system")
        agents.append(AgentRows(small.pk, small.name, args.per_agent, f"a{number:03d}-"))
    total = sum(a.count for a in agents)

    conn.execute("DROP INDEX IF EXISTS memory_embedding_hnsw")
    model = embedder_name()
    with (
        step(f"COPY of {total:,} memories") as elapsed,
        load_bar(total=total, description="COPY memories") as bar,
    ):
        copy_seconds = 0.0
        for agent in agents:
            copy_seconds += copy_rows(conn, synthetic, tenant.pk, agent, model, bar)
        load_seconds = elapsed()
    say(
        f"COPY: {total / copy_seconds:,.0f} rows/s in COPY alone ({copy_seconds:.1f} s); "
        f"{total / load_seconds:,.0f} rows/s with generating the data ({load_seconds:.1f} s)"
    )

    with step("ANALYZE memory_memory (as autovacuum would after a bulk load)"):
        conn.execute("ANALYZE memory_memory")

    sample = min(args.service_sample, agents[0].count)
    with step(f"keyword documents of {sample:,} memories by search_documents_refresh"):
        rows, seconds = keyword_documents_service(agents[0], sample)
    service_rate = rows / seconds
    say(
        f"search_documents_refresh (batches of {SERVICE_REFRESH_BATCH}, statistics trigger on, "
        "no HNSW index yet): "
        f"{service_rate:,.0f} rows/s -> {total / service_rate / 60:,.1f} min for all {total:,}"
    )
    with step(f"keyword documents of all {total:,} memories, set-based"):
        seconds = keyword_documents_set_based(conn, agents)
    say(f"set-based keyword documents + statistics: {total / seconds:,.0f} rows/s")
    same, checked = check_documents(conn, args.check_sample, args.seed)
    say(f"set-based documents identical to the service's on {same} of {checked} sampled memories")

    with step("VACUUM ANALYZE memory_memory"):
        conn.execute("VACUUM ANALYZE memory_memory")
    with step("HNSW index build"):
        build_seconds, hnsw_bytes = hnsw_rebuild(conn, args.maintenance_work_mem)
    table_bytes, index_bytes = conn.execute(
        "SELECT pg_table_size('memory_memory'), pg_indexes_size('memory_memory')"
    ).fetchone()
    say(
        f"HNSW (m {hnsw_index().m}, ef_construction {hnsw_index().ef_construction}, "
        f"maintenance_work_mem {args.maintenance_work_mem}): "
        f"built in {build_seconds:.1f} s ({total / build_seconds:,.0f} rows/s), "
        f"{hnsw_bytes / 2**20:,.0f} MiB; table {table_bytes / 2**20:,.0f} MiB, all indexes "
        f"{index_bytes / 2**20:,.0f} MiB"
    )
    conn.execute("ANALYZE")
    summary["load"] = {
        "memories": total,
        "copy_rows_per_s": total / copy_seconds,
        "load_seconds": load_seconds,
        "service_keyword_rows_per_s": service_rate,
        "set_based_keyword_seconds": seconds,
        "set_based_documents_identical": [same, checked],
        "hnsw_build_seconds": build_seconds,
        "hnsw_mib": hnsw_bytes / 2**20,
        "table_mib": table_bytes / 2**20,
        "indexes_mib": index_bytes / 2**20,
    }
    return agents


def finish_load(conn: Any, args: argparse.Namespace, agents: Sequence[AgentRows]) -> None:
    """Finish a load that was stopped during its keyword documents (on a loaded machine they
    take an hour at 1,000,000): the BM25 totals count every memory (the semantic leg's plan is
    chosen by them; memories without a document are found by the semantic leg only), then
    VACUUM ANALYZE and the HNSW build, unless the index is there."""
    built = conn.execute("SELECT to_regclass('memory_embedding_hnsw') IS NOT NULL").fetchone()[0]
    if built:
        return
    with_documents = conn.execute(
        "SELECT count(*) FROM memory_memory WHERE search_vector IS NOT NULL"
    ).fetchone()[0]
    say(f"finishing an interrupted load: {with_documents:,} memories have keyword documents")
    with conn.transaction():
        for statement in STATS_REBUILD_SQL:
            conn.execute(statement, {"agents": [a.id for a in agents]})
        conn.execute(
            """INSERT INTO memory_memorysearchtotals (agent_id, documents, positions)
               SELECT agent_id, count(*), coalesce(sum(search_length), 0) FROM memory_memory
               WHERE agent_id = ANY(%(agents)s) GROUP BY 1
               ON CONFLICT (agent_id) DO UPDATE SET documents = excluded.documents""",
            {"agents": [a.id for a in agents]},
        )
    with step("VACUUM ANALYZE memory_memory"):
        conn.execute("VACUUM ANALYZE memory_memory")
    with step("HNSW index build"):
        build_seconds, hnsw_bytes = hnsw_rebuild(conn, args.maintenance_work_mem)
    say(f"HNSW built in {build_seconds:.1f} s, {hnsw_bytes / 2**20:,.0f} MiB")
    conn.execute("ANALYZE")


def loaded_dataset(args: argparse.Namespace) -> tuple[Any, list[AgentRows]] | None:
    """The tenant and agents of an earlier run kept in the data folder, when they hold the sizes
    asked for (``--reuse``); None otherwise."""
    from django.db.models import Count

    from ledger.models import Agent, Tenant
    from memory.models import Memory

    tenant = Tenant.objects.filter(slug__startswith="bench-scale-").order_by("-pk").first()
    if tenant is None:
        return None
    counts = dict(
        Memory.objects.filter(tenant=tenant)
        .values_list("agent__name")
        .annotate(n=Count("id"))
        .values_list("agent__name", "n")
    )
    wanted = [("scale-big", args.memories, "big-")] + [
        (f"scale-{number:03d}", args.per_agent, f"a{number:03d}-") for number in range(args.agents)
    ]
    if any(counts.get(name) != count for name, count, _ in wanted) or len(counts) != len(wanted):
        say(f"the kept data does not match the sizes asked for ({len(counts)} agents): loading")
        return None
    agents = {a.name: a for a in Agent.objects.filter(tenant=tenant)}
    return tenant, [
        AgentRows(agents[name].pk, name, count, prefix) for name, count, prefix in wanted
    ]


def report_recall(
    conn: Any,
    args: argparse.Namespace,
    tenant_pk: int,
    agents: Sequence[AgentRows],
    big_queries: Sequence[Query],
    small_queries: Sequence[Query],
    summary: dict[str, Any],
) -> None:
    """recall@10 of each case against exact search, the plans chosen, and the index path's
    recall and latency at several hnsw.ef_search values."""
    from memory.search.filters import filter_parse

    flagged = filter_parse({"tags": [FLAG_TAG]})
    total = sum(a.count for a in agents)
    share_small = args.per_agent / total
    say(f"recall@{K} against exact search, {args.queries} queries per case; load {load_average()}")
    big_recall, nearest_big, big_exact = recall_of_selector(conn, big_queries, tenant_pk)
    small_recall, nearest_small, small_exact = recall_of_selector(conn, small_queries, tenant_pk)
    flag_recall = recall_of_dense_leg(conn, big_queries, flagged)
    summary["recall_at_10"] = {
        label: {"mean": statistics.mean(r.strict), "forgiving": statistics.mean(r.tolerant)}
        for label, r in (
            ("big agent", big_recall),
            ("small agent", small_recall),
            ("big agent + tag filter", flag_recall),
        )
    }
    big_share = agents[0].count / total
    from memory.search.plans import nearest_sql

    def selector_params(q: Query) -> dict[str, Any]:
        return nearest_params(q, tenant_pk)

    def dense_params(q: Query) -> dict[str, Any]:
        from django.utils import timezone

        from ledger.models import Agent
        from memory.search.legs import memory_candidates_query

        agent = Agent.objects.get(pk=q.agent.id)
        return memory_candidates_query(
            agent=agent, query=q.text, vector=q.vector, filters=flagged, now=timezone.now()
        )[1]

    big_plans = hnsw_share(nearest_sql(agents[0].count), big_queries, selector_params)
    small_plans = hnsw_share(nearest_sql(args.per_agent), small_queries, selector_params)
    flag_plans = hnsw_share(dense_leg_sql(flagged, agents[0].count), big_queries, dense_params)
    print(
        f"  memories_nearest, big agent ({big_share:.0%} of rows): {big_recall.line()}; {big_plans}"
    )
    print(
        f"  memories_nearest, one small agent (filter keeps {share_small:.1%} of rows): "
        f"{small_recall.line()}; {small_plans}"
    )
    print(
        f"  search's semantic leg, big agent + tag (keeps {FLAG_SHARE:.0%} of its rows): "
        f"{flag_recall.line()}; {flag_plans}"
    )
    # Each call follows an exact scan of the table, which pushes the index out of the cache:
    # these are cold-cache figures, not the service's steady state (the sweep below is warm).
    for label, values in (("big agent", nearest_big), ("small agent", nearest_small)):
        print(f"  memories_nearest latency, {label}, each after an exact scan: {spread(values)} ms")
    for label, queries, exact in (
        ("big agent", big_queries, big_exact),
        ("small agents", small_queries, small_exact),
    ):
        print(f"  the selector's index path for the {label} at hnsw.ef_search values:")
        for setting, result, latency in ef_search_sweep(queries, exact, tenant_pk):
            print(f"    {setting:14} {result.line()}; {spread(latency)} ms")


# --- filtered search (issue 22) ------------------------------------------------------------------

DATA_START = datetime(2024, 1, 1, tzinfo=UTC)  # memory n of an agent occurred n minutes after


def filtered_cases(agent_memories: int) -> list[tuple[str, dict[str, Any]]]:
    """Filters of the language (memory.search.filters) over the big agent, selective to broad,
    with the share of its rows each keeps."""
    minutes = agent_memories // 1000  # a window over 0.1 % of the agent's memories
    middle = DATA_START + timedelta(minutes=agent_memories // 2)
    customers = [f"c{n:04d}" for n in range(0, CUSTOMERS, CUSTOMERS // 5)][:5]
    return [
        (f"tag on {FLAG_SHARE:.0%}", {"tags": [FLAG_TAG]}),
        ("metadata customer = one (0.1 %)", {"metadata": {"customer": "c0042"}}),
        ("metadata customer in five (0.5 %)", {"metadata": {"customer": {"in": customers}}}),
        ("metadata channel = slack (25 %)", {"metadata": {"channel": "slack"}}),
        ("metadata priority >= 8 (20 %, a path)", {"metadata": {"priority": {"gte": 8}}}),
        ("occurred_at window (0.1 %)", {"occurred_at": {
            "gte": middle.isoformat(), "lt": (middle + timedelta(minutes=minutes)).isoformat()}}),
        ("occurred_at window (10 %)", {"occurred_at": {
            "gte": middle.isoformat(),
            "lt": (middle + timedelta(minutes=100 * minutes)).isoformat()}}),
        ("importance >= 0.9 (10 %)", {"importance": {"gte": 0.9}}),
        ("OR tag, channel = call (32 %)",
         {"OR": [{"tags": FLAG_TAG}, {"metadata": {"channel": "call"}}]}),
        ("NOT channel = slack (75 %)", {"NOT": {"metadata": {"channel": "slack"}}}),
        ("customer in five AND importance >= 0.5 (0.25 %)",
         {"metadata": {"customer": {"in": customers}}, "importance": {"gte": 0.5}}),
    ]  # fmt: skip


def agent_vectors(conn: Any, agent: AgentRows) -> tuple[Array, Array]:
    """Every active memory's id (sorted) and unit vector of the agent, for exact answers by
    brute force in numpy (an exact scan in SQL per query and filter would take hours)."""
    ids = np.empty(agent.count, dtype=np.int64)
    vectors = np.empty((agent.count, DIMENSIONS), dtype=np.float32)
    n = 0
    with conn.transaction(), conn.cursor(name="vectors") as cursor:
        cursor.itersize = 20_000
        cursor.execute(
            "SELECT id, embedding FROM memory_memory WHERE agent_id = %s AND archived_at IS NULL "
            "AND embedding IS NOT NULL ORDER BY id",
            [agent.id],
        )
        for memory_id, vector in cursor:
            ids[n] = memory_id
            vectors[n] = vector.to_numpy() if hasattr(vector, "to_numpy") else vector
            n += 1
    return ids[:n], vectors[:n]


def exact_filtered(
    conn: Any, agent: AgentRows, parsed: Any, queries: Sequence[Query], every: tuple[Array, Array]
) -> tuple[list[Neighbours], float]:
    """Each query's exact nearest rows among the agent's rows passing the filter (found by SQL,
    ranked by numpy), and the share of the agent's rows the filter keeps."""
    from memory.search.plans import ACTIVE_ROWS

    condition, params = parsed.sql()
    rows = conn.execute(
        f"SELECT id FROM memory_memory WHERE {ACTIVE_ROWS} AND ({condition})",  # noqa: S608
        {"tenant": queries[0].agent_tenant, "agent": agent.id, "now": datetime.now(UTC), **params},
    ).fetchall()
    ids, vectors = every
    kept = np.searchsorted(ids, np.array(sorted(int(r[0]) for r in rows), dtype=np.int64))
    subset = vectors[kept]
    answers = []
    for q in queries:
        distance = 1.0 - subset @ np.asarray(q.vector, dtype=np.float32)
        top = np.argsort(distance)[:K] if len(distance) > K else np.argsort(distance)
        answers.append([(int(ids[kept[i]]), float(distance[i])) for i in top])
    return answers, len(kept) / max(len(ids), 1)


def filtered_plan_named(filters: Any, agent_memories: int, params: dict[str, Any]) -> str:
    """Which way the service's filtered semantic leg goes, and the exact path's bound."""
    sql = dense_leg_sql(filters, agent_memories, params)
    bound = re.search(r"LIMIT (\d+) \+ 1", sql)
    order = "index first" if "WITH nearest AS" in sql else "rows first"
    if "memory_memorymetadataterm" in sql:
        order += ", by metadata terms"
    return f"{order}, exact up to {int(bound.group(1)):,}" if bound else "HNSW only"


def report_filtered(conn: Any, args: argparse.Namespace, queries: Sequence[Query]) -> None:
    """recall@10 of the semantic leg against exact, the plans, and the database part of a
    search (p50/p95), for each filter of filtered_cases over the big agent."""
    from django.db import connection, transaction
    from django.utils import timezone

    from ledger.models import Agent
    from memory.search import legs as search
    from memory.search.filters import filter_parse

    big = queries[0].agent
    agent = Agent.objects.get(pk=big.id)
    for q in queries:
        q.agent_tenant = agent.tenant_id
    every = agent_vectors(conn, big) if not args.skip_recall else None
    say(f"filtered search over the big agent, {len(queries)} queries per case; "
        f"load {load_average()}")  # fmt: skip
    for label, raw in filtered_cases(big.count):
        if args.cases and not any(
            text.strip().lower() in label.lower() for text in args.cases.split(",")
        ):
            continue
        parsed = filter_parse(raw)
        line = f"  {label:48}"
        if every is not None:
            exact, share = exact_filtered(conn, big, parsed, queries, every)
            result = Recall([], [])
            for q, answer in zip(queries, exact, strict=True):
                _, params = search.memory_candidates_query(
                    agent=agent, query=q.text, vector=q.vector, filters=parsed, now=timezone.now()
                )
                sql = dense_leg_sql(parsed, big.count, params)
                with transaction.atomic(), connection.cursor() as cursor:
                    hnsw_scan_configure(
                        cursor, ef_search=params["ef_search"], order=SEMANTIC_LEG_ORDER
                    )
                    cursor.execute(sql, params)
                    found = [int(r[0]) for r in cursor.fetchall()]
                nearest = sorted(with_distances(conn, found, q.vector), key=lambda p: p[1])[:K]
                strict, tolerant = recall_of(nearest, answer)
                result.strict.append(strict)
                result.tolerant.append(tolerant)
            plan = filtered_plan_named(parsed, big.count, params)
            line += f" keeps {share:6.2%}; {plan}; {result.line()}"
        print(line, flush=True)
        # Alternated rounds with and without the bounded read that picks the exact plan (the
        # baseline: straight to the HNSW index, as before the filter language).
        latency: list[float] = []
        baseline: list[float] = []
        saved = search.FILTERED_EXACT_MAX_ROWS
        for round_number in range(2):
            for probe in (True, False) if round_number == 0 else (False, True):
                if args.skip_baseline and not probe:
                    continue
                search.FILTERED_EXACT_MAX_ROWS = saved if probe else 0
                try:
                    (latency if probe else baseline).extend(time_candidates_sql(queries, parsed))
                finally:
                    search.FILTERED_EXACT_MAX_ROWS = saved
        p95 = percentile(latency, 0.95)
        print(
            f"      database part {spread(latency)} ms; target p95 <= {TARGET_DB_P95_MS:.0f} ms: "
            f"{verdict(p95 <= TARGET_DB_P95_MS)}",
            flush=True,
        )
        if baseline:
            print(
                f"      straight to HNSW {spread(baseline)} ms; median ratio "
                f"{statistics.median(latency) / statistics.median(baseline):.2f}",
                flush=True,
            )
        if args.explain:
            for text in explain_candidates_sql(queries[0], parsed):
                print("      " + text)


def run(stack: Stack, args: argparse.Namespace, summary: dict[str, Any]) -> None:
    global WARM_EVERY_QUERY
    WARM_EVERY_QUERY = args.warm
    from memory.search.filters import filter_parse

    conn = raw_connection()
    check_copy_columns(conn)
    server = conn.execute("SHOW server_version").fetchone()[0]
    pgvector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    say(f"PostgreSQL {server}, pgvector {pgvector.fetchone()[0]}")
    vocabulary = made_up_vocabulary(args.vocabulary * 2, args.seed)
    # Keep only words PostgreSQL's english configuration indexes (no stop words, no empties).
    kept = conn.execute(
        "SELECT w FROM unnest(%s::text[]) WITH ORDINALITY AS v(w, n) "
        "WHERE to_tsvector('english', w) <> ''::tsvector ORDER BY n",
        [vocabulary],
    ).fetchall()
    vocabulary = [str(r[0]) for r in kept][: args.vocabulary]
    synthetic = Synthetic(clusters=args.clusters, vocabulary=vocabulary, seed=args.seed)
    loaded = loaded_dataset(args) if args.reuse else None
    if loaded is not None:
        tenant, agents = loaded
        key = stack.admin_key_for(tenant)
        say(f"reusing the {sum(a.count for a in agents):,} memories already in {args.data_dir}")
        finish_load(conn, args, agents)
    else:
        tenant, key = stack.tenant_with_admin_key(slug="bench-scale")
        agents = load_dataset(conn, args, tenant, synthetic, summary)
        if args.load_only:
            say("loaded; measure it with --reuse")
            return
    # Queries around the same topics, drawn the same whether or not the data was loaded now.
    synthetic.rng = np.random.default_rng(args.seed + 1)
    queries_rng_vectors, query_clusters = synthetic.vectors(args.queries * 2)
    query_texts = synthetic.texts(query_clusters, 3, 6)
    big_queries = [
        Query(agents[0], query_texts[i], queries_rng_vectors[i].tolist())
        for i in range(args.queries)
    ]
    small_agents = agents[1:] or agents[:1]
    small_queries = [
        Query(
            small_agents[i % len(small_agents)],
            query_texts[args.queries + i],
            queries_rng_vectors[args.queries + i].tolist(),
        )
        for i in range(args.queries)
    ]
    flagged = filter_parse({"tags": [FLAG_TAG]})
    unfiltered = filter_parse(None)

    if args.filtered:
        report_filtered(conn, args, big_queries)
        conn.close()
        return
    if not args.skip_recall:
        report_recall(conn, args, tenant.pk, agents, big_queries, small_queries, summary)

    say(f"database part of a search, {args.queries} queries per case; load {load_average()}")
    cases = [
        ("big agent", big_queries, unfiltered),
        ("small agents", small_queries, unfiltered),
        ("big agent + tag filter", big_queries, flagged),
    ]
    db: dict[str, list[float]] = {}
    for label, queries, filters in cases:
        db[label] = time_candidates_sql(queries, filters)
        p95 = percentile(db[label], 0.95)
        summary.setdefault("database_ms", {})[label] = {
            "p50": statistics.median(db[label]),
            "p95": p95,
            "target_p95": TARGET_DB_P95_MS,
        }
        print(
            f"  {label:24} {spread(db[label])} ms; target p95 <= {TARGET_DB_P95_MS:.0f} ms: "
            f"{verdict(p95 <= TARGET_DB_P95_MS)}"
        )
        legs = time_legs(queries, filters)
        print(
            "      alone, p50: "
            + ", ".join(
                f"{name} {statistics.median(values):.1f} ms"
                for name, values in legs.items()
                if name != "keyword rows"
            )
            + f"; keyword leg rows p50 {statistics.median(legs['keyword rows']):.0f}"
        )
        if args.explain:
            for line in explain_candidates_sql(queries[0], filters):
                print("      " + line)
    ratio = statistics.median(db["big agent"]) / statistics.median(db["small agents"])
    print(f"  median big agent / median small agents: {ratio:.1f}x")
    if args.narrowed_variant:
        rows, ceiling = (int(part) for part in args.narrowed_variant.split(":"))
        say(f"tag filter, the service's settings against {rows} rows from a list of {ceiling}")
        compare_narrowed(conn, big_queries, flagged, (rows, ceiling), recall=not args.skip_recall)

    say(f"search over HTTP, {args.queries} queries per case; load {load_average()}")
    api = stack.client(key)
    # Two kinds of request. The query's own vector, sent with it: the search as it runs on data
    # whose vectors come from the same model as the query's. The query's words alone: the
    # service embeds them with the real model, whose vector lies far from every synthetic
    # cluster, so the HNSW walk finds no close neighbourhood to settle in (slower than real
    # data would be); it adds the embedding's cost, measured on its own below.
    for send_vector, kind in ((True, "query vector sent"), (False, "query words only")):
        api_p50: dict[str, float] = {}
        for label, queries in (("big agent", big_queries), ("small agents", small_queries)):
            client, server, candidates = time_api(api, queries, send_vector=send_vector)
            api_p50[label] = statistics.median(client)
            p95 = percentile(client, 0.95)
            summary.setdefault("api_ms", {})[f"{kind}, {label}"] = {
                "p50": api_p50[label],
                "p95": p95,
                "target_p95": TARGET_API_P95_MS,
            }
            print(
                f"  {kind}, {label:12} client {spread(client)} ms; server took_ms "
                f"{spread(server)} ms; candidates median {statistics.median(candidates):.0f}; "
                f"target p95 <= {TARGET_API_P95_MS:.0f} ms: {verdict(p95 <= TARGET_API_P95_MS)}"
            )
        ratio = api_p50["big agent"] / api_p50["small agents"]
        print(f"  {kind}: median big agent / median small agents: {ratio:.1f}x")
    api.close()
    embedding = time_query_embedding([q.text for q in big_queries])
    print(f"  the query embedding alone (in this process, the same model): {spread(embedding)} ms")
    conn.close()


if __name__ == "__main__":
    main()
