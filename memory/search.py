"""Search my memories (SPEC 5): one call over four sources, merged and explained.

Per source, candidates come from a semantic leg (nearest vectors) and a keyword leg (full-text
matches), both index-backed. Each candidate's *similarity* fuses the two kinds of evidence the
way the LoCoMo dev set chose (docs/retrieval-research.md): min-max normalised cosine (over every
candidate of the call, since all vectors come from one embedder) weighted 0.5 and min-max
normalised keyword score (per source, since the sources score keywords differently) weighted
0.5, plus 0.3 of the better of its two session neighbours' scores, rescaled to [0, 1]. Then every
candidate is ranked by

    score = 0.5·similarity + 0.2·recency + 0.2·importance + 0.1·source_priority

(weights configurable per deployment and per request), de-duplicated by content hash, cut by the
similarity threshold and the top K. Each hit carries the terms and their contributions.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from contextvars import Context, copy_context
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.metrics import search_observe, search_plan_note
from ledger.models import Agent, RecallSettings
from ledger.selectors import event_visible_params, event_visible_sql
from memory import policies
from memory.embeddings import EmbeddingUnavailable, embed_query, embedder_name
from memory.lifecycle import DECAY_BASE, EFFECTIVE_IMPORTANCE_SQL, SECONDS_PER_WEEK
from memory.selectors import (
    ACTIVE_ROWS,
    HNSW_EF_SEARCH,
    SemanticPlan,
    cosine_similarity_sql,
    hnsw_ef_search,
    hnsw_scan_configure,
    nearest_rows_sql,
    semantic_plan,
    vector_literal,
)

logger = logging.getLogger(__name__)

AGENT_MEMORY = "agent_memory"
AUDIT_LOG = "audit_log"
WORKFLOW_STEPS = "workflow_steps"
KNOWLEDGE_BASE = "knowledge_base"
SOURCES = (AGENT_MEMORY, AUDIT_LOG, WORKFLOW_STEPS, KNOWLEDGE_BASE)
SOURCE_PRIORITY = {AGENT_MEMORY: 1.0, AUDIT_LOG: 0.8, WORKFLOW_STEPS: 0.6, KNOWLEDGE_BASE: 0.5}
WORKFLOW_STEP_KIND = "workflow.step_completed"

# Fusion of the two kinds of evidence, chosen on LoCoMo dev (docs/retrieval-research.md).
DENSE_WEIGHT = 0.5
NEIGHBOUR_BOOST = 0.3
BM25_K1 = 1.2
BM25_B = 0.75
# Candidate pool sizes: the semantic leg's top N per source; the keyword leg's rows per query.
MEMORY_DENSE_CANDIDATES = 100
# Under a tag, metadata or type filter, the HNSW scan must walk past about 1 / (the share kept)
# rows for each one it returns: asking for half as many halves the walk, and the ranking of ten
# results does not need a hundred semantic candidates from a tenth of the rows. 30 let recall@10
# fall below 0.95, one query finding none of its ten (bench/memory_scale.py).
MEMORY_DENSE_CANDIDATES_NARROWED = 50
MEMORY_KEYWORD_CANDIDATES = 300
# The keyword leg fetches the rows of the query's rarest lexemes while they number at most this
# (LoCoMo dev: R@10 0.809 / 0.810 / 0.811 at 150 / 300 / 600, with 152 / 198 / 276 candidates).
KEYWORD_FETCH_BUDGET = 300
EVENT_CANDIDATES = 50
# The audit log's semantic leg compares the query with the tenant's newest embedded events.
EVENT_SEMANTIC_WINDOW = 2000
KNOWLEDGE_CANDIDATES = 50


@dataclass(frozen=True)
class SearchWeights:
    similarity: float = 0.5
    recency: float = 0.2
    importance: float = 0.2
    source_priority: float = 0.1

    @classmethod
    def configured(cls) -> SearchWeights:
        similarity, recency, importance, priority = settings.SEARCH_WEIGHTS
        return cls(similarity, recency, importance, priority)


@dataclass(frozen=True)
class SearchFilters:
    """Narrow the agent's own memories; the other sources are not episodic and ignore these."""

    session_id: str | None = None
    memory_type: str | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def narrowing(self) -> bool:
        """Whether a filter beyond the session keeps an unknown share of the agent's rows."""
        return bool(self.tags or self.metadata or self.memory_type)


@dataclass
class Candidate:
    """One possible result, before ranking. ``keyword`` is the source's raw keyword score."""

    source: str
    id: int
    content: str
    cosine: float | None
    keyword: float
    moment: datetime
    importance: float
    content_hash: str
    details: dict[str, Any]
    previous_id: int | None = None
    next_id: int | None = None
    # Whether the candidate's own text (not only its session neighbours') shares a query word.
    own_match: bool = True
    relevance: float = 0.0


@dataclass(frozen=True)
class SearchHit:
    source: str
    id: int
    content: str
    score: float
    breakdown: dict[str, float]
    contributions: dict[str, float]
    details: dict[str, Any]


@dataclass(frozen=True)
class SearchOutcome:
    hits: list[SearchHit]
    semantic: bool
    took_ms: float
    candidates: int


# --- agent memory ------------------------------------------------------------------------------

# BM25 statistics of the query's lexemes among the agent's keyword documents, with the agent's
# totals and the table's estimated row count (one row with a NULL lexeme when the query has
# none): what the semantic leg's plan is chosen by.
LEXEME_STATS_SQL = """
SELECT u.lexeme, coalesce(t.df, 0), s.documents, s.positions, s.table_rows
FROM (
    SELECT coalesce(max(documents), 0) AS documents, coalesce(max(positions), 0) AS positions,
           (SELECT greatest(reltuples, 0) FROM pg_class
            WHERE oid = 'memory_memory'::regclass) AS table_rows
    FROM memory_memorysearchtotals WHERE agent_id = %(agent)s
) AS s
LEFT JOIN unnest(to_tsvector('english', %(query)s)) AS u ON true
LEFT JOIN memory_memoryterm AS t ON t.agent_id = %(agent)s AND t.lexeme = u.lexeme
"""

FILTER_SQL = {
    "session_id": " AND session_id = %(session_id)s",
    "memory_type": " AND memory_type = %(memory_type)s",
    "tags": " AND tags @> %(tags)s::varchar[]",
    "metadata": " AND metadata @> %(metadata)s::jsonb",
}
# The agent's rows holding the fetched lexemes come from the GIN index memory_agent_lexemes
# (keys "<agent>:<lexeme>"), a few hundred at most (KEYWORD_FETCH_BUDGET), and the filters are
# checked on those rows. OFFSET 0 keeps the filters out of the inner query: otherwise the
# planner may AND in the tag index's bitmap, every row of the tenant with the tag (42 ms for a
# tag on 200,000 of 2,000,000 rows).
KEYWORD_LEG = """
    SELECT id FROM (
        SELECT id, tenant_id, agent_id, archived_at, expires_at, session_id, memory_type, tags,
               metadata
        FROM memory_memory
        WHERE memory_agent_lexemes(agent_id, search_vector) && %(agent_lexemes)s::text[]
        OFFSET 0
    ) AS memory_memory
    WHERE {where} LIMIT %(keyword_k)s"""
NO_ROWS = "SELECT NULL::bigint AS id WHERE false"

# One round trip: the candidates of both legs, each with what ranks it (the text and the other
# details are read for the top K only, MEMORY_DETAILS_SQL): its cosine (keyword-only ones too: the
# research lost 0.03 R@10 without it), its Okapi BM25 from its tsvector positions and the
# agent's statistics, and its session neighbours for the neighbour boost. The candidate ids are
# gathered into one array first so each row is read once, by primary key, however large the
# table (a hash join would read all of it).
MEMORY_CANDIDATES_SQL = """
WITH dense AS ({dense}),
keyword AS ({keyword}),
candidate_ids AS MATERIALIZED (
    SELECT array_agg(id) AS ids FROM (SELECT id FROM dense UNION SELECT id FROM keyword) AS c
),
query_terms AS (
    SELECT * FROM unnest(%(lexemes)s::text[], %(idfs)s::float8[]) AS q(lexeme, idf)
)
SELECT m.id, extract(epoch FROM m.occurred_at)::float8 AS occurred_epoch, m.content_hash,
       {effective_importance} AS effective_importance,
       {cosine} AS cosine,
       coalesce((
           SELECT sum(q.idf * array_length(u.positions, 1) * (%(k1)s + 1)
                      / (array_length(u.positions, 1)
                         + %(k1)s * (1 - %(b)s + %(b)s * m.search_length / %(avgdl)s::float8)))
           -- Only the query's lexemes leave the document: setweight marks them and ts_filter
           -- keeps them, both in C, instead of one row per lexeme of the candidate's window.
           FROM unnest(ts_filter(
               setweight(setweight(d.document, 'D'), 'A', %(lexemes)s::text[]), '{{a}}'
           )) AS u
           JOIN query_terms AS q ON q.lexeme = u.lexeme
       ), 0) AS keyword,
       before.id AS previous_id, after.id AS next_id,
       {own_match} AS own_match
FROM memory_memory AS m
-- The keyword document lives out of line (TOAST): every function given m.search_vector would
-- fetch and copy it again. The lateral copy fetches it once per candidate for both uses.
CROSS JOIN LATERAL (SELECT m.search_vector || ''::tsvector AS document OFFSET 0) AS d
LEFT JOIN LATERAL (
    SELECT p.id FROM memory_memory AS p
    WHERE m.session_id <> '' AND p.tenant_id = m.tenant_id AND p.agent_id = m.agent_id
      AND p.session_id = m.session_id AND (p.occurred_at, p.id) < (m.occurred_at, m.id)
    ORDER BY p.occurred_at DESC, p.id DESC LIMIT 1
) AS before ON true
LEFT JOIN LATERAL (
    SELECT p.id FROM memory_memory AS p
    WHERE m.session_id <> '' AND p.tenant_id = m.tenant_id AND p.agent_id = m.agent_id
      AND p.session_id = m.session_id AND (p.occurred_at, p.id) > (m.occurred_at, m.id)
    ORDER BY p.occurred_at, p.id LIMIT 1
) AS after ON true
WHERE m.id = ANY((SELECT ids FROM candidate_ids)::bigint[])
"""


def tsquery_any(lexemes: Iterable[str]) -> str:
    """A tsquery matching any of these lexemes, each quoted so no character is an operator."""
    quoted = ("'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'" for lexeme in lexemes)
    return " | ".join(quoted)


def bm25_idf(*, documents: int, df: int) -> float:
    return math.log(1 + (documents - df + 0.5) / (df + 0.5))


# Tags, metadata and memory type narrow the agent's rows by an unknown share: assumed a tenth,
# which gives the index its widest list.
NARROWING_FILTER_SHARE = 0.1


def semantic_share(agent_memories: int, table_rows: float, filters: SearchFilters) -> float:
    """The share of the indexed rows the semantic leg's filters are expected to keep."""
    share = agent_memories / max(table_rows, agent_memories, 1)
    if filters.narrowing:
        share *= NARROWING_FILTER_SHARE
    return share


def dense_leg_plan(agent_memories: int, filters: SearchFilters) -> SemanticPlan:
    return semantic_plan(
        agent_memories,
        narrowed=filters.narrowing,
        within_session=filters.session_id is not None,
    )


def dense_candidates(agent_memories: int, filters: SearchFilters) -> int:
    """How many rows the semantic leg asks for."""
    if filters.narrowing and dense_leg_plan(agent_memories, filters) is SemanticPlan.INDEX:
        return MEMORY_DENSE_CANDIDATES_NARROWED
    return MEMORY_DENSE_CANDIDATES


def dense_leg_sql(agent_memories: int, filters: SearchFilters) -> str:
    """The semantic leg for an agent of this size under these filters (the plan chosen by
    memory.selectors.semantic_plan)."""
    plan = dense_leg_plan(agent_memories, filters)
    return nearest_rows_sql(filtered_where(filters), plan, limit="dense_k")


def keyword_leg_sql(filters: SearchFilters) -> str:
    return KEYWORD_LEG.format(where=filtered_where(filters))


def filtered_where(filters: SearchFilters) -> str:
    """The agent's active memories, narrowed by the filters given (a SQL condition)."""
    return ACTIVE_ROWS + "".join(
        clause for name, clause in FILTER_SQL.items() if getattr(filters, name)
    )


def memory_candidates_query(
    *,
    agent: Agent,
    query: str,
    vector: Sequence[float] | None,
    filters: SearchFilters,
    now: datetime,
) -> tuple[str, dict[str, Any]]:
    """The agent-memory candidate SQL and its parameters (the benchmarks time it alone)."""
    with connection.cursor() as cursor:
        cursor.execute(LEXEME_STATS_SQL, {"query": query, "agent": agent.pk})
        rows = cursor.fetchall()
    documents, positions, table_rows = int(rows[0][2]), int(rows[0][3]), float(rows[0][4])
    stats = [row for row in rows if row[0] is not None]
    lexemes = [str(row[0]) for row in stats]
    idfs = [bm25_idf(documents=documents, df=int(row[1])) for row in stats]
    present = sorted((int(row[1]), str(row[0])) for row in stats if int(row[1]) > 0)
    # Rarest lexemes first, while the rows they name fit the budget: rare words carry the most
    # BM25 weight, and rows that share only common words with the query are left to the
    # semantic leg (they are still scored if it brings them). When even the rarest names more
    # rows than the budget, the leg would return an arbitrary few of them: it is skipped.
    fetching: list[str] = []
    fetched_rows = 0
    for df, lexeme in present:
        if fetched_rows + df > KEYWORD_FETCH_BUDGET:
            break
        fetching.append(lexeme)
        fetched_rows += df
    params: dict[str, Any] = {
        "tenant": agent.tenant_id,
        "agent": agent.pk,
        "now": now,
        "vector": vector_literal(vector) if vector is not None else None,
        "dense_k": dense_candidates(documents, filters),
        "keyword_k": MEMORY_KEYWORD_CANDIDATES,
        "ef_search": hnsw_ef_search(semantic_share(documents, table_rows, filters)),
        "agent_lexemes": [f"{agent.pk}:{lexeme}" for lexeme in fetching],
        "any_lexeme": tsquery_any(lexeme for _, lexeme in present),
        "lexemes": lexemes,
        "idfs": idfs,
        "k1": BM25_K1,
        "b": BM25_B,
        "avgdl": positions / documents if documents else 1.0,
        "decay_base": DECAY_BASE,
        "week": SECONDS_PER_WEEK,
        "session_id": filters.session_id,
        "memory_type": filters.memory_type,
        "tags": list(filters.tags),
        "metadata": json.dumps(filters.metadata),
    }
    dense = dense_leg_sql(documents, filters)
    search_plan_note(dense_leg_plan(documents, filters) if vector is not None else "keyword")
    sql = MEMORY_CANDIDATES_SQL.format(
        dense=dense if vector is not None else NO_ROWS,
        keyword=keyword_leg_sql(filters) if fetching else NO_ROWS,
        # Unqualified columns in it resolve to the memory: no other relation has them.
        effective_importance=EFFECTIVE_IMPORTANCE_SQL,
        cosine=cosine_similarity_sql("m.embedding") if vector is not None else "NULL",
        # The memory's own line (weight A) shares a word with the query, not just a neighbour.
        own_match="ts_filter(d.document, '{a}') @@ %(any_lexeme)s::tsquery" if present else "false",
    )
    return sql, params


def _memory_candidates(
    *,
    agent: Agent,
    query: str,
    vector: Sequence[float] | None,
    filters: SearchFilters,
    now: datetime,
) -> list[Candidate]:
    sql, params = memory_candidates_query(
        agent=agent, query=query, vector=vector, filters=filters, now=now
    )
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        # Relaxed order: the candidates are ranked by their exact cosine afterwards anyway, and
        # pgvector documents it as the better-recall mode (bench/memory_scale.py, tag filter
        # keeping 5 % of 2,000,000 rows: recall@10 0.947 relaxed, 0.940 strict, 30 queries).
        hnsw_scan_configure(cursor, ef_search=params["ef_search"], order="relaxed_order")
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [
        Candidate(
            source=AGENT_MEMORY,
            id=int(row[0]),
            content="",  # read for the hits kept (memory_hits_completed)
            cosine=None if row[4] is None else float(row[4]),
            keyword=float(row[5]),
            moment=datetime.fromtimestamp(float(row[1]), tz=UTC),
            importance=float(row[3]),
            content_hash=row[2],
            details={},
            previous_id=row[6],
            next_id=row[7],
            own_match=bool(row[8]),
        )
        for row in rows
    ]


MEMORY_DETAILS_SQL = """
SELECT id, content, role, session_id, memory_type, tags, metadata, occurred_at, created_at,
       importance, updated_at
FROM memory_memory WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s AND id = ANY(%(ids)s)
"""


def memory_hits_completed(agent: Agent, hits: list[SearchHit]) -> list[SearchHit]:
    """The hits with their memories' text and details, read for these few only (ranking needs
    neither; reading them for every candidate cost more than the rest of the ranking). A memory
    deleted in between leaves the list."""
    ids = [hit.id for hit in hits if hit.source == AGENT_MEMORY]
    if not ids:
        return hits
    with connection.cursor() as cursor:
        cursor.execute(
            MEMORY_DETAILS_SQL, {"tenant": agent.tenant_id, "agent": agent.pk, "ids": ids}
        )
        rows = {int(row[0]): row for row in cursor.fetchall()}
    completed = []
    for hit in hits:
        if hit.source != AGENT_MEMORY:
            completed.append(hit)
        elif (row := rows.get(hit.id)) is not None:
            details = {
                "role": row[2],
                "session_id": row[3],
                "memory_type": row[4],
                "tags": list(row[5]),
                # Django leaves jsonb undecoded on raw cursors.
                "metadata": json.loads(row[6]) if isinstance(row[6], str) else row[6],
                "occurred_at": row[7],
                "created_at": row[8],
                "stored_importance": float(row[9]),
                "updated_at": row[10],
            }
            completed.append(replace(hit, content=row[1], details=details))
    return completed


# --- audit log and workflow steps --------------------------------------------------------------

# Query words that carry meaning: the ledger's words minus English stop words.
EVENT_WORDS_SQL = """
SELECT coalesce(array_agg(word), '{}') FROM unnest(ledger_words(%(query)s)) AS word
WHERE to_tsvector('english', word) <> ''::tsvector
"""

# Both legs keep to the events the agent may see (ledger.selectors.event_visible_sql).
EVENT_CANDIDATES_SQL = """
WITH keyword AS (
    SELECT e.id FROM ledger_event AS e
    WHERE e.tenant_id = %(tenant)s AND e.search_words && %(words)s::text[]
      AND {visible}
    ORDER BY e.seq DESC LIMIT %(limit)s
),
dense AS ({dense}),
candidates AS (SELECT id FROM keyword UNION SELECT id FROM dense)
SELECT e.id, e.seq, e.kind, e.actor, e.run_id, ledger_display_text(e.payload), e.created_at,
       {cosine} AS cosine,
       cardinality(ARRAY(SELECT unnest(e.search_words) INTERSECT SELECT unnest(%(words)s::text[])))
FROM candidates JOIN ledger_event AS e USING (id)
LEFT JOIN memory_eventembedding AS ee ON ee.event_id = e.id AND ee.model = %(model)s
"""
EVENT_DENSE_LEG = """
    SELECT newest.event_id AS id FROM (
        SELECT event_id, embedding FROM memory_eventembedding
        WHERE tenant_id = %(tenant)s AND model = %(model)s
        ORDER BY event_id DESC LIMIT %(window)s
    ) AS newest JOIN ledger_event AS e ON e.id = newest.event_id
    WHERE {visible}
    ORDER BY newest.embedding <=> %(vector)s::vector LIMIT %(limit)s"""


def _event_candidates(
    *, agent: Agent, query: str, vector: Sequence[float] | None, sources: Sequence[str]
) -> list[Candidate]:
    recall_settings = RecallSettings.for_tenant(agent.tenant)
    visible = event_visible_sql("e")
    with connection.cursor() as cursor:
        cursor.execute(EVENT_WORDS_SQL, {"query": query})
        words = list(cursor.fetchone()[0])
        cursor.execute(
            EVENT_CANDIDATES_SQL.format(
                visible=visible,
                dense=EVENT_DENSE_LEG.format(visible=visible) if vector is not None else NO_ROWS,
                cosine=cosine_similarity_sql("ee.embedding")
                if vector is not None
                else "NULL::float8",
            ),
            {
                "tenant": agent.tenant_id,
                **event_visible_params(agent=agent, settings=recall_settings),
                "words": words,
                "limit": EVENT_CANDIDATES,
                "window": EVENT_SEMANTIC_WINDOW,
                "model": embedder_name() if vector is not None else "",
                "vector": vector_literal(vector) if vector is not None else None,
            },
        )
        rows = cursor.fetchall()
    candidates = []
    # The text is ledger_display_text(payload): ledger.models.displayable_text in SQL, so no
    # other part of a payload (which may hold secrets) leaves the database.
    for event_id, seq, kind, actor, run_id, text, created_at, cosine, matched in rows:
        source = WORKFLOW_STEPS if kind == WORKFLOW_STEP_KIND else AUDIT_LOG
        if source not in sources or not text:
            continue
        candidates.append(
            Candidate(
                source=source,
                id=int(seq),
                content=text,
                cosine=None if cosine is None else float(cosine),
                keyword=float(matched) / max(len(words), 1),
                moment=created_at,
                importance=float(
                    recall_settings.kind_importance.get(kind, recall_settings.default_importance)
                ),
                content_hash=policies.content_hash(text),
                details={
                    "event_id": int(event_id),
                    "kind": kind,
                    "actor": actor,
                    "run_id": run_id,
                    "created_at": created_at,
                },
            )
        )
    return candidates


# --- knowledge base ----------------------------------------------------------------------------


def _knowledge_candidates(
    *, agent: Agent, query: str, vector: Sequence[float] | None
) -> list[Candidate]:
    try:
        from memory.knowledge import (  # type: ignore[import-not-found,unused-ignore]
            knowledge_candidates,
        )
    except ImportError:  # the knowledge base is not installed yet
        return []
    return [
        Candidate(
            source=KNOWLEDGE_BASE,
            id=chunk.chunk_id,
            content=chunk.text,
            cosine=chunk.cosine,
            keyword=chunk.keyword,
            moment=chunk.published_at,
            importance=0.5,
            content_hash=chunk.content_hash,
            details={"document_id": chunk.document_id, "title": chunk.title, "kind": chunk.kind},
        )
        for chunk in knowledge_candidates(
            tenant=agent.tenant, query=query, query_vector=vector, limit=KNOWLEDGE_CANDIDATES
        )
    ]


# --- fusion and ranking ------------------------------------------------------------------------


def _minmax(values: Sequence[float]) -> list[float]:
    if not values:
        return []
    low, high = min(values), max(values)
    if high == low:
        return [1.0 if high > 0 else 0.0 for _ in values]
    return [(value - low) / (high - low) for value in values]


def _fuse(candidates: list[Candidate]) -> None:
    """Set each candidate's relevance in [0, 1] from its semantic and keyword evidence."""
    cosines = [c.cosine for c in candidates if c.cosine is not None]
    floor = min(cosines, default=0.0)
    dense = _minmax([c.cosine if c.cosine is not None else floor for c in candidates])
    keyword = [0.0] * len(candidates)
    for source in SOURCES:
        positions = [i for i, c in enumerate(candidates) if c.source == source]
        for i, value in zip(
            positions, _minmax([candidates[i].keyword for i in positions]), strict=True
        ):
            keyword[i] = value
    semantic_weight = DENSE_WEIGHT if cosines else 0.0
    fused = {
        (c.source, c.id): semantic_weight * d + (1 - semantic_weight) * k
        for c, d, k in zip(candidates, dense, keyword, strict=True)
    }
    for c in candidates:
        around = [
            fused.get((c.source, neighbour), 0.0)
            for neighbour in (c.previous_id, c.next_id)
            if neighbour is not None
        ]
        c.relevance = (fused[(c.source, c.id)] + NEIGHBOUR_BOOST * max(around, default=0.0)) / (
            1 + NEIGHBOUR_BOOST
        )


def recency(moment: datetime, now: datetime) -> float:
    """1 now, halving every ``SEARCH_RECENCY_HALF_LIFE_DAYS``."""
    age_days = max((now - moment).total_seconds(), 0.0) / 86400
    return float(0.5 ** (age_days / settings.SEARCH_RECENCY_HALF_LIFE_DAYS))


def _ranked(
    candidates: list[Candidate], *, weights: SearchWeights, threshold: float, now: datetime
) -> list[SearchHit]:
    hits: dict[str, SearchHit] = {}
    for c in candidates:
        # Weak on both kinds of evidence: neither close in meaning nor sharing a word.
        if not (c.keyword > 0 and c.own_match) and (c.cosine is None or c.cosine < threshold):
            continue
        breakdown = {
            "similarity": round(c.relevance, 4),
            "recency": round(recency(c.moment, now), 4),
            "importance": round(c.importance, 4),
            "source_priority": SOURCE_PRIORITY[c.source],
        }
        contributions = {
            term: round(getattr(weights, term) * value, 4) for term, value in breakdown.items()
        }
        hit = SearchHit(
            source=c.source,
            id=c.id,
            content=c.content,
            score=round(sum(contributions.values()), 4),
            breakdown={
                **breakdown,
                "cosine": round(c.cosine, 4) if c.cosine is not None else 0.0,
                "keyword": round(c.keyword, 4),
            },
            contributions=contributions,
            details=c.details,
        )
        kept = hits.get(c.content_hash)
        if kept is None or (hit.score, -SOURCES.index(hit.source)) > (
            kept.score,
            -SOURCES.index(kept.source),
        ):
            hits[c.content_hash] = hit
    return sorted(hits.values(), key=lambda h: (-h.score, SOURCES.index(h.source), h.id))


def memories_search(
    *,
    agent: Agent,
    query: str,
    top_k: int = 5,
    sources: Sequence[str] = SOURCES,
    filters: SearchFilters | None = None,
    weights: SearchWeights | None = None,
    threshold: float | None = None,
    now: datetime | None = None,
    record_retrieval: bool = True,
    vector: Sequence[float] | None = None,
) -> SearchOutcome:
    """Search the agent's memories, the ledger it may see and the knowledge base (SPEC 5).

    Without an embedder the keyword evidence alone ranks (``semantic`` is false). Returned
    memories get their retrieval statistics updated by a task, after the response, unless
    ``record_retrieval`` is false: a person looking through an agent's memories (the memory
    explorer) is not the agent using them, and must not keep them from decaying. ``vector`` is
    the query's embedding when the caller already has it (from the same model).
    """
    started = time.perf_counter()
    moment = now or timezone.now()
    if vector is None:
        try:
            vector = embed_query(query)
        except EmbeddingUnavailable as exc:
            logger.warning("searching by keywords only: %s", exc)
    candidates: list[Candidate] = []
    if AGENT_MEMORY in sources:
        candidates += _memory_candidates(
            agent=agent, query=query, vector=vector, filters=filters or SearchFilters(), now=moment
        )
    if AUDIT_LOG in sources or WORKFLOW_STEPS in sources:
        candidates += _event_candidates(agent=agent, query=query, vector=vector, sources=sources)
    if KNOWLEDGE_BASE in sources:
        candidates += _knowledge_candidates(agent=agent, query=query, vector=vector)
    _fuse(candidates)
    hits = _ranked(
        candidates,
        weights=weights or SearchWeights.configured(),
        threshold=settings.SEARCH_SIMILARITY_THRESHOLD if threshold is None else threshold,
        now=moment,
    )[:top_k]
    hits = memory_hits_completed(agent, hits)
    if record_retrieval:
        _mark_retrieved(agent, [h.id for h in hits if h.source == AGENT_MEMORY], moment)
    search_observe(time.perf_counter() - started)
    return SearchOutcome(
        hits=hits,
        semantic=vector is not None,
        took_ms=round((time.perf_counter() - started) * 1000, 2),
        candidates=len(candidates),
    )


def _mark_retrieved(agent: Agent, memory_ids: list[int], moment: datetime) -> None:
    """Hand the retrieval to the recorder thread: publishing a Celery message costs about 2 ms,
    which the search's caller need not wait for."""
    if memory_ids:
        # With the request's context, so the task carries its request id (config.logs).
        _retrievals.put((agent.tenant_id, memory_ids, moment.isoformat(), copy_context()))
        _retrieval_recorder_started()


# Retrievals waiting to be queued for the worker, and the daemon thread that queues them. A
# process that dies with some still here loses only those statistics (decay then sees the
# memories as retrieved a little earlier than they were).
_retrievals: queue.SimpleQueue[tuple[int, list[int], str, Context]] = queue.SimpleQueue()
_recorder_lock = threading.Lock()
_recorder: threading.Thread | None = None
# The most searches one retrieval task records (one transaction, one ledger append).
RETRIEVALS_PER_TASK = 200


def _retrieval_recorder_started() -> None:
    global _recorder
    if _recorder is not None and _recorder.is_alive():
        return
    with _recorder_lock:
        if _recorder is None or not _recorder.is_alive():
            _recorder = threading.Thread(
                target=_record_retrievals, name="retrieval-recorder", daemon=True
            )
            _recorder.start()


def _record_retrievals() -> None:
    from memory.tasks import memories_mark_retrieved_batch_task

    while True:
        waiting = [_retrievals.get()]
        # What piled up while the last batch was being queued leaves as one task per tenant:
        # under load a task (and a ledger append) per search cost the worker more CPU than the
        # searches themselves saved. A batch carries its first search's context (request id).
        with contextlib.suppress(queue.Empty):
            while len(waiting) < RETRIEVALS_PER_TASK:
                waiting.append(_retrievals.get_nowait())
        by_tenant: dict[int, list[tuple[list[int], str, Context]]] = {}
        for tenant_id, memory_ids, at, context in waiting:
            by_tenant.setdefault(tenant_id, []).append((memory_ids, at, context))
        for tenant_id, batch in by_tenant.items():
            retrievals = [(memory_ids, at) for memory_ids, at, _ in batch]
            try:
                batch[0][2].run(memories_mark_retrieved_batch_task.delay, tenant_id, retrievals)
            except Exception:  # a broker outage must not fail a read; decay sees older retrievals
                logger.exception("could not queue retrieval statistics of %d searches", len(batch))


__all__ = [
    "HNSW_EF_SEARCH",
    "SOURCES",
    "SearchFilters",
    "SearchHit",
    "SearchOutcome",
    "SearchWeights",
    "memories_search",
]
