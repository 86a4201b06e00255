"""The candidates of each source: a semantic leg (nearest vectors) and a keyword leg (full text)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from config.metrics import search_plan_note
from config.routers import read_connection
from config.sql import row_named, rows_named
from ledger.models import WORKFLOW_STEP_KIND, Agent, RecallSettings
from ledger.selectors import event_visible_params, event_visible_sql
from memory.embeddings.backends import embedder_name
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS
from memory.episodic import policies
from memory.episodic.lifecycle import DECAY_BASE, EFFECTIVE_IMPORTANCE_SQL, SECONDS_PER_WEEK
from memory.episodic.validity import CURRENTLY_VALID, VALIDITY_SQL, Validity
from memory.search.filters import FILTER_COLUMNS, FILTER_PREFIX, MemoryFilter
from memory.search.plans import (
    LIVE_ROWS,
    SKETCH_OVERSAMPLE,
    SemanticPlan,
    cosine_similarity_sql,
    hnsw_ef_search,
    hnsw_scan_configure,
    nearest_rows_sql,
    semantic_plan,
    vector_literal,
)
from memory.search.ranking import (
    AGENT_MEMORY,
    AUDIT_LOG,
    KNOWLEDGE_BASE,
    WORKFLOW_STEPS,
    Candidate,
    KeywordTerms,
    RankingKnobs,
    bm25_idf,
)
from memory.search.temporal import QueryTime

# Candidate pool sizes: the semantic leg's top N per source; the keyword leg's rows per query.
# A search's time grows with its candidates (each is read, scored in SQL and parsed): 60 rather
# than 100 semantic candidates left LoCoMo dev's R@10 as it was in every conversation (0.852
# against 0.851; every leave-one-conversation-out fold chose 60 over 100 beside the ranking
# knobs) with 15 % fewer candidates (167 against 196 a question) and 2 ms less per search at the
# p95 (docs/retrieval-research.md, "Candidate pools").
MEMORY_DENSE_CANDIDATES = 60
# Under a tag, metadata or type filter, the HNSW scan must walk past about 1 / (the share kept)
# rows for each one it returns: asking for fewer shortens the walk (it was half of 100 before the
# unfiltered pool became 60). 30 let recall@10 fall below 0.95, one query finding none of its ten
# (bench/memory_scale.py).
MEMORY_DENSE_CANDIDATES_NARROWED = 50
MEMORY_KEYWORD_CANDIDATES = 300
# The keyword leg fetches the rows of the query's rarest lexemes while they number at most this
# (LoCoMo dev: R@10 0.809 / 0.810 / 0.811 at 150 / 300 / 600, with 152 / 198 / 276 candidates).
KEYWORD_FETCH_BUDGET = 300
EVENT_CANDIDATES = 50
# The audit log's semantic leg compares the query with the tenant's newest embedded events.
EVENT_SEMANTIC_WINDOW = 2000
KNOWLEDGE_CANDIDATES = 50
# The agent's memories a search reads: live (not archived, not expired) and valid by the
# request's validity (memory.episodic.validity: by default those still valid).
SEARCHED_ROWS = LIVE_ROWS + VALIDITY_SQL


# BM25 statistics of the query's lexemes among the agent's keyword documents, with the agent's
# totals and the table's estimated row count (one row with a NULL lexeme when the query has
# none): what the semantic leg's plan is chosen by.
LEXEME_STATS_SQL = """
SELECT u.lexeme, coalesce(t.df, 0) AS df, s.documents, s.positions, s.table_rows
FROM (
    SELECT coalesce(max(documents), 0) AS documents, coalesce(max(positions), 0) AS positions,
           (SELECT greatest(reltuples, 0) FROM pg_class
            WHERE oid = 'memory_memory'::regclass) AS table_rows
    FROM memory_memorysearchtotals WHERE agent_id = %(agent)s
) AS s
LEFT JOIN unnest(to_tsvector('english', %(query)s)) AS u ON true
LEFT JOIN memory_memoryterm AS t ON t.agent_id = %(agent)s AND t.lexeme = u.lexeme
"""

# The agent's rows holding the fetched lexemes come from the GIN index memory_agent_lexemes
# (keys "<agent>:<lexeme>"), a few hundred at most (KEYWORD_FETCH_BUDGET), and the filters are
# checked on those rows. OFFSET 0 keeps the filters out of the inner query: otherwise the
# planner may AND in the tag index's bitmap, every row of the tenant with the tag (42 ms for a
# tag on 200,000 of 2,000,000 rows).
KEYWORD_LEG = """
    SELECT id FROM (
        SELECT tenant_id, agent_id, archived_at, valid_from, valid_until, {filter_columns}
        FROM memory_memory
        WHERE memory_agent_lexemes(agent_id, search_vector) && %(agent_lexemes)s::text[]
        OFFSET 0
    ) AS memory_memory
    WHERE {where} LIMIT %(keyword_k)s"""
NO_ROWS = "SELECT NULL::bigint AS id WHERE false"

# A memory whose text ends with a question (ranking.RankingKnobs.question_penalty): "?", then
# perhaps closing quotes or brackets and one trailing bracketed note ("[shares a photo of ...]").
# The pattern of the SQL function memory_asks_question (migration memory.0025), which keeps
# ``Memory.asks_question``: changing it needs a migration.
QUESTION_SQL_PATTERN = r"\?[\s\"'\u201d\u2019)]*(\[[^]]*\]\s*)?$"

# One round trip: the candidates of both legs, each with what ranks it (the text and the other
# details are read for the top K only, MEMORY_DETAILS_SQL): its cosine (keyword-only ones too: the
# research lost 0.03 R@10 without it), its document's length and query lexeme counts (the ranking
# makes its BM25 of them with the agent's statistics), and its session neighbours for the
# neighbour boost. The candidate ids are gathered into one array first so each row is read
# once, by primary key, however large the table (a hash join would read all of it).
MEMORY_CANDIDATES_SQL = """
WITH dense AS ({dense}),
keyword AS ({keyword}),
candidate_ids AS MATERIALIZED (
    SELECT array_agg(id) AS ids FROM (SELECT id FROM dense UNION SELECT id FROM keyword) AS c
)
SELECT m.id, extract(epoch FROM m.occurred_at)::float8 AS occurred_epoch, m.content_hash,
       {effective_importance} AS effective_importance,
       {cosine} AS cosine,
       m.search_length / %(avgdl)s::float8 AS length_ratio,
       -- The query's lexemes with their positions in the whole document and in the own line
       -- (weight A): the ranking weighs the two (ranking.KeywordTerms). setweight marks the
       -- query's lexemes and ts_filter keeps them, both in C; as text, psycopg reads them
       -- without a row per lexeme in the executor.
       ts_filter(
           setweight(setweight(d.document, 'D'), 'A', %(lexemes)s::text[]), '{{a}}'
       )::text AS window_terms,
       ts_filter(
           setweight(setweight(ts_filter(d.document, '{{a}}'), 'D'), 'A', %(lexemes)s::text[]),
           '{{a}}'
       )::text AS own_terms,
       before.id AS previous_id, after.id AS next_id,
       -- Kept by a trigger (migration memory.0025); null in rows written before it.
       {mentions_time} AS mentions_time,
       coalesce(m.asks_question, memory_asks_question(m.content)) AS asks_question
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


# Tags, metadata and memory type narrow the agent's rows by an unknown share: assumed a tenth,
# which gives the index its widest list.
NARROWING_FILTER_SHARE = 0.1


def semantic_share(agent_memories: int, table_rows: float, filters: MemoryFilter) -> float:
    """The share of the indexed rows the semantic leg's filters are expected to keep."""
    share = agent_memories / max(table_rows, agent_memories, 1)
    if filters.narrowing:
        share *= NARROWING_FILTER_SHARE
    return share


def dense_leg_plan(agent_memories: int, filters: MemoryFilter) -> SemanticPlan:
    return semantic_plan(
        agent_memories,
        narrowed=filters.narrowing,
        within_session=filters.session_id is not None,
    )


def dense_candidates(agent_memories: int, filters: MemoryFilter) -> int:
    """How many rows the semantic leg asks for."""
    if filters.narrowing and dense_leg_plan(agent_memories, filters) is SemanticPlan.INDEX:
        return MEMORY_DENSE_CANDIDATES_NARROWED
    return MEMORY_DENSE_CANDIDATES


def dense_leg_sql(
    agent_memories: int,
    filters: MemoryFilter,
    *,
    exact_max_rows: int | None = None,
    index_first: bool = False,
    beside_terms: MemoryFilter | None = None,
) -> str:
    """The semantic leg for an agent of this size under these filters (the plan chosen by
    memory.search.plans.semantic_plan; for a large agent under a filter, filtered_nearest_sql
    with ``exact_max_rows``, ``index_first`` and ``beside_terms``)."""
    plan = dense_leg_plan(agent_memories, filters)
    where = filtered_where(filters)
    if plan is SemanticPlan.INDEX and filters.narrowing:
        return filtered_nearest_sql(
            where,
            filtered_where(filters, opaque=True),
            most=FILTERED_EXACT_MAX_ROWS if exact_max_rows is None else exact_max_rows,
            index_first=index_first,
            beside_terms=(
                None
                if beside_terms is None
                else filtered_where(beside_terms, TERMS_REST_PREFIX, opaque=True)
            ),
        )
    return nearest_rows_sql(where, plan, limit="dense_k")


# A filter that keeps at most this many of a large agent's rows is answered exactly: its rows
# (found through the filter's own indexes) sorted by distance. Past it, the HNSW index with
# iterative scans; below it, the index would walk about agent rows / kept rows entries for each
# one it returns and stop at hnsw.max_scan_tuples with too few (bench/memory_scale.py). The
# floor of filtered_exact_max_rows; 0 turns the exact path off.
FILTERED_EXACT_MAX_ROWS = 2000
# Past this many times the exact path's bound in the planner's estimate, a filter is taken to keep
# many rows and the index is tried first (FILTERED_INDEX_FIRST).
FILTERED_INDEX_FIRST_MARGIN = 2


def filtered_exact_max_rows(table_rows: float, dense_k: int) -> int:
    """How many rows a filter may keep and still be answered exactly: where both paths read
    about as many rows. The exact path reads each of the filter's M rows once; the HNSW scan,
    whose graph holds every agent's N rows, reads about dense_k * N / M of them (and checks the
    filter on each) to collect dense_k. The two meet at M = sqrt(dense_k * N): 7,400 rows at
    1,100,000, where 2,000 left a filter keeping 2,500 to the index, which walked 22,000 rows
    and stopped at hnsw.max_scan_tuples. Never below FILTERED_EXACT_MAX_ROWS; 0 when that is 0."""
    if FILTERED_EXACT_MAX_ROWS <= 0:
        return 0
    return max(FILTERED_EXACT_MAX_ROWS, math.ceil(math.sqrt(dense_k * max(table_rows, 0.0))))


# One statement: the bounded read decides, and each branch's gate (a one-time filter on an
# InitPlan) keeps the other from running at all. The bounded read keeps each row's distance (a
# number; not its vector, which cost more to keep than the read itself), so the exact branch
# sorts what it read: reading the rows again by primary key took as long as the bounded read
# (6 of 12 ms for 1,033 rows at 1,100,000, EXPLAIN ANALYZE).
FILTERED_NEAREST = """
WITH few AS MATERIALIZED ({bounded})
{exact}
UNION ALL
({index_scan})"""
FILTERED_BOUNDED_READ = """
    SELECT id, embedding <=> %(vector)s::vector AS distance FROM memory_memory
    WHERE {where} AND embedding IS NOT NULL LIMIT {most} + 1"""
FILTERED_EXACT = """(SELECT id FROM few WHERE (SELECT count(*) FROM few) <= {most}
 ORDER BY distance LIMIT %(dense_k)s)"""
# The same two paths in the other order, for a filter the planner expects to keep many rows: the
# index first; only when it comes back short of dense_k rows (it stopped at hnsw.max_scan_tuples:
# the filter keeps few after all) does the bounded read run, and the exact branch after it. So
# an estimate that is wrong costs time, never rows; one that is right saves the bounded read,
# which for a filter no index serves walks the agent's rows until it has found most + 1.
FILTERED_INDEX_FIRST = """
WITH nearest AS MATERIALIZED ({index_scan}),
few AS MATERIALIZED ({bounded})
SELECT id FROM nearest
UNION ALL
{exact}"""


# A filter that names metadata values (MemoryFilter.metadata_terms) is answered from
# the terms table first (memory.search.models.MemoryMetadataTerm): its primary key gives the
# rows holding those values with their sketches, without the table. When they number at most
# the exact path's bound, the nearest of them by Hamming distance are read from the table by
# id, checked against the rest of the filter and ranked by their exact distance (as
# SemanticPlan.SKETCH does for a small agent); past the bound, the HNSW index serves, as in
# FILTERED_NEAREST. The
# count is exact, where the planner's estimate for a metadata value came from a sample of
# documents and once sent a filter keeping 0.1 % to the index (118 ms, recall@10 0.57). The
# bounded read of FILTERED_NEAREST cost a buffer, the containment checks and a 1.5 kB vector
# per row: 11 of the search's 20 ms for 5,099 rows of 1,100,000. Should fewer than dense_k of
# the rows read pass the rest of the filter, the bounded read runs after all.
FILTERED_BY_TERMS = """
WITH named AS MATERIALIZED (
    SELECT memory_id, embedding_bits FROM memory_memorymetadataterm
    WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s AND term = ANY(ARRAY(
        SELECT unnest(memory_metadata_terms(d)) FROM unnest(%(term_documents)s::jsonb[]) AS d
    ))
    LIMIT {most} + 1),
named_count AS MATERIALIZED (SELECT count(*) AS found FROM named),
near AS MATERIALIZED (
    SELECT id, embedding <=> %(vector)s::vector AS distance FROM memory_memory
    WHERE id = ANY(ARRAY(
        SELECT memory_id FROM named
        CROSS JOIN LATERAL (
            SELECT embedding_bits # binary_quantize(%(vector)s::vector) AS differ
        ) AS signs
        WHERE (SELECT found FROM named_count) <= {most}
        ORDER BY bit_count(signs.differ)
            + bit_count(signs.differ & %(weight_low)s::bit({dimensions}))
            + 2 * bit_count(signs.differ & %(weight_high)s::bit({dimensions}))
        LIMIT greatest(
            %(dense_k)s * {oversample}, {minimum},
            ceil((SELECT found FROM named_count) * {share})::int)
    )) AND {where} AND embedding IS NOT NULL),
few AS MATERIALIZED ({bounded})
(SELECT id FROM near WHERE (SELECT count(*) FROM near) >= %(dense_k)s
 ORDER BY distance LIMIT %(dense_k)s)
UNION ALL
{exact}
UNION ALL
({index_scan})"""
# The sketches are compared by a Hamming distance weighted by the query: a dimension whose sign
# differs counts 1 to 4 by the size of the query's value there (four bands of |q| / max |q|,
# as two bit masks: sketch_weight_masks). How many of the nearest are then read and ranked
# exactly: at least this many, and at least this share of the rows named. Recall@10 against
# exact (1,100,000 memories, 100 queries; five customers' 5,099 rows, and those with importance
# >= 0.5, which the table checks after), plain Hamming: 400 rows read 0.918 / 0.805, 600 0.945 /
# 0.872, 1,000 0.972 / 0.941, 1,500 0.990 / 0.970; weighted: 400 0.976 / 0.938, 600 0.989 /
# 0.968, 800 0.993 / 0.985. Each row read by id costs about 5 µs there.
TERMS_MIN_CANDIDATES = 600
TERMS_CANDIDATE_SHARE = 0.15
TERMS_WEIGHT_BANDS = 4


def sketch_weight_masks(vector: Sequence[float]) -> tuple[str, str]:
    """The low and high bits of each dimension's weight band (0-3, by |value| / max |value|),
    as bit strings in pgvector's binary_quantize order (the first dimension first)."""
    top = max((abs(value) for value in vector), default=0.0) or 1.0
    bands = [
        min(TERMS_WEIGHT_BANDS - 1, int(abs(value) / top * TERMS_WEIGHT_BANDS)) for value in vector
    ]
    low = "".join("1" if band & 1 else "0" for band in bands)
    high = "".join("1" if band & 2 else "0" for band in bands)
    return low, high


# The parameters of the rest of such a filter, checked on the rows read by id. The rows are
# known to hold the values, and the rest is written so that no index serves it: checking the
# values again made the planner read every row they name through the metadata index instead
# (29 ms for 1,530 ids in a probe at 1,100,000 memories).
TERMS_REST_PREFIX = "rest_"


def filtered_nearest_sql(
    where: str,
    opaque_where: str,
    *,
    most: int = FILTERED_EXACT_MAX_ROWS,
    index_first: bool = False,
    beside_terms: str | None = None,
) -> str:
    """The nearest rows of a large agent under a filter that keeps an unknown share of them:
    exact when it keeps at most ``most``, through the HNSW index otherwise; ``index_first``
    tries the index before counting (FILTERED_INDEX_FIRST); with ``beside_terms`` (the rest of
    the filter as a condition), the rows the filter's metadata values name are ranked by their
    sketches first (FILTERED_BY_TERMS; its parameter ``term_documents``).

    The index branch checks the filter as ``opaque_where``, which no index can serve: it runs
    only once the filter is known (or expected) to keep many rows, and then the HNSW scan is
    the plan wanted, whatever the planner estimates (a metadata condition's estimate comes from
    a sample of a hundred documents: a bitmap read and sort of all of them could win)."""
    if most <= 0:
        return nearest_rows_sql(opaque_where, SemanticPlan.INDEX, limit="dense_k")
    exact = FILTERED_EXACT.format(most=most)
    if index_first:
        # The bounded read runs only when the index came back short.
        short = f"{where} AND (SELECT count(*) FROM nearest) < %(dense_k)s"  # noqa: S608
        return FILTERED_INDEX_FIRST.format(
            index_scan=nearest_rows_sql(opaque_where, SemanticPlan.INDEX, limit="dense_k"),
            bounded=FILTERED_BOUNDED_READ.format(where=short, most=most),
            exact=exact,
        )
    if beside_terms is not None:
        # The terms name few rows; the rows read from them fall short; either path found many.
        few_named = f"(SELECT found FROM named_count) <= {most}"  # noqa: S608
        short = f"{where} AND {few_named} AND (SELECT count(*) FROM near) < %(dense_k)s"  # noqa: S608
        many = f"{opaque_where} AND NOT ({few_named} AND (SELECT count(*) FROM few) <= {most})"  # noqa: S608
        return FILTERED_BY_TERMS.format(
            most=most,
            oversample=SKETCH_OVERSAMPLE,
            minimum=TERMS_MIN_CANDIDATES,
            share=TERMS_CANDIDATE_SHARE,
            dimensions=LOCAL_DIMENSIONS,
            where=beside_terms,
            bounded=FILTERED_BOUNDED_READ.format(where=short, most=most),
            exact=exact,
            index_scan=nearest_rows_sql(many, SemanticPlan.INDEX, limit="dense_k"),
        )
    gated = f"{opaque_where} AND (SELECT count(*) FROM few) > {most}"  # noqa: S608
    return FILTERED_NEAREST.format(
        bounded=FILTERED_BOUNDED_READ.format(where=where, most=most),
        exact=exact,
        index_scan=nearest_rows_sql(gated, SemanticPlan.INDEX, limit="dense_k"),
    )


# The planner's row estimate for a filter over the agent's rows: EXPLAIN plans, runs nothing.
FILTER_ROWS_ESTIMATE_SQL = (
    "EXPLAIN (FORMAT JSON) SELECT id FROM memory_memory WHERE {where} AND embedding IS NOT NULL"
)


def filter_rows_estimate(cursor: Any, filters: MemoryFilter, params: dict[str, Any]) -> float:
    """How many of the agent's rows the planner expects the filter to keep (from the columns'
    statistics: tags' element frequencies, histograms of times and importance, a sample of
    metadata documents), planned with the request's values."""
    cursor.execute(FILTER_ROWS_ESTIMATE_SQL.format(where=filtered_where(filters)), params)
    (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return float(plan[0]["Plan"]["Plan Rows"])


def keyword_leg_sql(filters: MemoryFilter) -> str:
    return KEYWORD_LEG.format(
        where=filtered_where(filters), filter_columns=", ".join(FILTER_COLUMNS)
    )


def filtered_where(
    filters: MemoryFilter, prefix: str = FILTER_PREFIX, *, opaque: bool = False
) -> str:
    """The agent's active memories, narrowed by the filter given (a SQL condition whose
    parameters are ``filters.sql(prefix=prefix)``'s); ``opaque``: written so that no index
    serves the filter (the same rows: a WHERE keeps only what is true)."""
    condition, _ = filters.sql(prefix=prefix)
    if filters.root is None:
        return SEARCHED_ROWS
    return f"{SEARCHED_ROWS} AND ({condition}){' IS TRUE' if opaque else ''}"


def filtered_plan(
    agent_memories: int,
    filters: MemoryFilter,
    table_rows: float,
    params: dict[str, Any],
    vector: Sequence[float],
) -> dict[str, Any]:
    """dense_leg_sql's choices for a large agent under a filter: the exact path's bound for a
    table of this size, and whether the planner expects the filter to keep so many rows that
    the index is tried first, or the terms serve (their parameters added to ``params``, the
    sketch weights from the query ``vector``). Nothing to choose (an empty dict) for any other
    semantic leg."""
    if not filters.narrowing or dense_leg_plan(agent_memories, filters) is not SemanticPlan.INDEX:
        return {}
    most = filtered_exact_max_rows(table_rows, params["dense_k"])
    if most <= 0:
        return {"exact_max_rows": 0}
    terms = filters.metadata_terms()
    if terms is not None:  # counted exactly by the statement: no estimate needed
        params["term_documents"] = [json.dumps(document) for document in terms.documents]
        params["weight_low"], params["weight_high"] = sketch_weight_masks(vector)
        params.update(terms.rest.sql(prefix=TERMS_REST_PREFIX)[1])
        return {"exact_max_rows": most, "beside_terms": terms.rest}
    with read_connection.cursor() as cursor:
        expected = filter_rows_estimate(cursor, filters, params)
    return {
        "exact_max_rows": most,
        "index_first": expected >= FILTERED_INDEX_FIRST_MARGIN * most,
    }


def memory_candidates_query(
    *,
    agent: Agent,
    query: str,
    vector: Sequence[float] | None,
    filters: MemoryFilter,
    now: datetime,
    validity: Validity = CURRENTLY_VALID,
    when: QueryTime | None = None,
) -> tuple[str, dict[str, Any]]:
    """The agent-memory candidate SQL and its parameters (the benchmarks time it alone).
    ``when``: what the query says about time; a question asking when marks the candidates
    whose text names a time."""
    with read_connection.cursor() as cursor:
        cursor.execute(LEXEME_STATS_SQL, {"query": query, "agent": agent.pk})
        rows = rows_named(cursor)
    totals = rows[0]
    documents, positions = int(totals.documents), int(totals.positions)
    table_rows = float(totals.table_rows)
    stats = [row for row in rows if row.lexeme is not None]
    lexemes = [str(row.lexeme) for row in stats]
    idfs = [bm25_idf(documents=documents, df=int(row.df)) for row in stats]
    present = sorted((int(row.df), str(row.lexeme)) for row in stats if int(row.df) > 0)
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
        **validity.params(),
        "vector": vector_literal(vector) if vector is not None else None,
        "dense_k": dense_candidates(documents, filters),
        "keyword_k": MEMORY_KEYWORD_CANDIDATES,
        "ef_search": hnsw_ef_search(semantic_share(documents, table_rows, filters)),
        "agent_lexemes": [f"{agent.pk}:{lexeme}" for lexeme in fetching],
        "lexemes": lexemes,
        # Read by memory_candidates, not by the statement: the BM25 is made in the ranking.
        "idfs": idfs,
        "avgdl": positions / documents if documents else 1.0,
        "decay_base": DECAY_BASE,
        "week": SECONDS_PER_WEEK,
        **filters.sql()[1],
    }
    dense = (
        dense_leg_sql(
            documents, filters, **filtered_plan(documents, filters, table_rows, params, vector)
        )
        if vector is not None
        else NO_ROWS
    )
    search_plan_note(dense_leg_plan(documents, filters) if vector is not None else "keyword")
    sql = MEMORY_CANDIDATES_SQL.format(
        dense=dense,
        keyword=keyword_leg_sql(filters) if fetching else NO_ROWS,
        # Unqualified columns in it resolve to the memory: no other relation has them.
        effective_importance=EFFECTIVE_IMPORTANCE_SQL,
        cosine=cosine_similarity_sql("m.embedding") if vector is not None else "NULL",
        mentions_time=(
            "coalesce(m.mentions_time, memory_mentions_time(m.content))"
            if when and when.asks_when
            else "false"
        ),
    )
    return sql, params


def memory_candidates(
    *,
    agent: Agent,
    query: str,
    vector: Sequence[float] | None,
    filters: MemoryFilter,
    now: datetime,
    validity: Validity = CURRENTLY_VALID,
    when: QueryTime | None = None,
) -> list[Candidate]:
    sql, params = memory_candidates_query(
        agent=agent,
        query=query,
        vector=vector,
        filters=filters,
        now=now,
        validity=validity,
        when=when,
    )
    with (
        transaction.atomic(using=read_connection.alias, savepoint=False),
        read_connection.cursor() as cursor,
    ):
        # Relaxed order: the candidates are ranked by their exact cosine afterwards anyway, and
        # pgvector documents it as the better-recall mode (bench/memory_scale.py, tag filter
        # keeping 5 % of 2,000,000 rows: recall@10 0.947 relaxed, 0.940 strict, 30 queries).
        hnsw_scan_configure(cursor, ef_search=params["ef_search"], order="relaxed_order")
        cursor.execute(sql, params)
        rows = rows_named(cursor)
    own_line_weight = RankingKnobs.configured().own_line_weight
    lexemes = params["lexemes"]
    candidates = []
    for row in rows:
        own, window = tsvector_counts(row.own_terms), tsvector_counts(row.window_terms)
        terms = KeywordTerms(
            params["idfs"],
            [own.get(lexeme, 0) for lexeme in lexemes],
            [window.get(lexeme, 0) for lexeme in lexemes],
            float(row.length_ratio),
        )
        candidates.append(memory_candidate(row, terms, own_line_weight))
    return candidates


# One entry of a tsvector's text form: 'lexeme' (a quote doubled, a backslash escaped), then
# perhaps its positions (":3A,10A").
TSVECTOR_ENTRY = re.compile(r"'((?:[^'\\]|''|\\.)*)'(?::([0-9A-D,]+))?")
TSVECTOR_ESCAPE = re.compile(r"'(')|\\(.)")


def tsvector_counts(text: str | None) -> dict[str, int]:
    """Each lexeme of a tsvector's text form with its number of positions (1 without any)."""
    counts = {}
    for lexeme, positions in TSVECTOR_ENTRY.findall(text or ""):
        if "'" in lexeme or "\\" in lexeme:
            lexeme = TSVECTOR_ESCAPE.sub(lambda m: m.group(1) or m.group(2), lexeme)
        counts[lexeme] = positions.count(",") + 1 if positions else 1
    return counts


def memory_candidate(row: Any, terms: KeywordTerms, own_line_weight: float) -> Candidate:
    return Candidate(
        source=AGENT_MEMORY,
        id=int(row.id),
        content="",  # read for the hits kept (memory_hits_completed)
        cosine=None if row.cosine is None else float(row.cosine),
        keyword=terms.score(own_line_weight),
        keyword_terms=terms,
        moment=datetime.fromtimestamp(float(row.occurred_epoch), tz=UTC),
        importance=float(row.effective_importance),
        content_hash=row.content_hash,
        details={},
        previous_id=row.previous_id,
        next_id=row.next_id,
        # The memory's own line shares a word with the query, not just a neighbour's.
        own_match=any(terms.own),
        mentions_time=bool(row.mentions_time),
        asks_question=bool(row.asks_question),
    )


# Pseudo-relevance feedback: each candidate's mean cosine to the first ranking's best memories,
# from the stored vectors (a few hundred rows read by primary key; no embedding).
FEEDBACK_SQL = """
SELECT c.id, avg(1 - nullif(c.embedding <=> b.embedding, 'NaN'::float8)) AS feedback
FROM memory_memory AS c
JOIN memory_memory AS b
  ON b.id = ANY(%(best)s) AND b.tenant_id = %(tenant)s AND b.agent_id = %(agent)s
 AND b.embedding IS NOT NULL
WHERE c.id = ANY(%(ids)s) AND c.tenant_id = %(tenant)s AND c.agent_id = %(agent)s
  AND c.embedding IS NOT NULL
GROUP BY c.id
"""


def memory_feedback(agent: Agent) -> Callable[[list[int], list[int]], dict[int, float]]:
    """The feedback source of memory.search.ranking.fuse_with_feedback for this agent."""

    def similar(best: list[int], ids: list[int]) -> dict[int, float]:
        with read_connection.cursor() as cursor:
            cursor.execute(
                FEEDBACK_SQL,
                {"best": best, "ids": ids, "tenant": agent.tenant_id, "agent": agent.pk},
            )
            return {
                int(row.id): float(row.feedback)
                for row in rows_named(cursor)
                if row.feedback is not None
            }

    return similar


# Query words that carry meaning: the ledger's words minus English stop words.
EVENT_WORDS_SQL = """
SELECT coalesce(array_agg(word), '{}') AS words FROM unnest(ledger_words(%(query)s)) AS word
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
SELECT e.id, e.seq, e.kind, e.actor, e.run_id, ledger_display_text(e.kind, e.payload) AS text,
       e.created_at, {cosine} AS cosine,
       cardinality(ARRAY(SELECT unnest(e.search_words) INTERSECT SELECT unnest(%(words)s::text[])))
           AS matched
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


def event_candidates(
    *, agent: Agent, query: str, vector: Sequence[float] | None, sources: Sequence[str]
) -> list[Candidate]:
    recall_settings = RecallSettings.for_tenant(agent.tenant)
    visible = event_visible_sql("e")
    with read_connection.cursor() as cursor:
        cursor.execute(EVENT_WORDS_SQL, {"query": query})
        found = row_named(cursor)
        words = list(found.words) if found is not None else []
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
        rows = rows_named(cursor)
    candidates = []
    # The text is ledger_display_text(kind, payload): ledger.models.displayable_text in SQL, so no
    # other part of a payload (which may hold secrets) leaves the database.
    for row in rows:
        source = WORKFLOW_STEPS if row.kind == WORKFLOW_STEP_KIND else AUDIT_LOG
        if source not in sources or not row.text:
            continue
        candidates.append(
            Candidate(
                source=source,
                id=int(row.seq),
                content=row.text,
                cosine=None if row.cosine is None else float(row.cosine),
                keyword=float(row.matched) / max(len(words), 1),
                moment=row.created_at,
                importance=float(
                    recall_settings.kind_importance.get(
                        row.kind, recall_settings.default_importance
                    )
                ),
                content_hash=policies.content_hash(row.text),
                details={
                    "event_id": int(row.id),
                    "kind": row.kind,
                    "actor": row.actor,
                    "run_id": row.run_id,
                    "created_at": row.created_at,
                },
            )
        )
    return candidates


def knowledge_base_candidates(
    *, agent: Agent, query: str, vector: Sequence[float] | None
) -> list[Candidate]:
    try:
        from memory.knowledge.selectors import knowledge_candidates
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
