"""Reads of the knowledge base: its search (published chunks, semantic and keyword legs fused as
memory search fuses them) and the skills that apply to an agent."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from config.api import ApiError
from config.routers import read_connection
from config.sql import rows_named
from ledger.models import Agent, Tenant
from memory.embeddings.backends import EmbeddingUnavailable, embed_query
from memory.embeddings.local_embedder import DIMENSIONS
from memory.models import KnowledgeDocument, KnowledgeKind
from memory.search.plans import cosine_similarity_sql, hnsw_scan_configure, vector_literal
from memory.search.ranking import hybrid, minmax, semantic_evidence

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnowledgeCandidate:
    chunk_id: int
    document_id: int
    title: str
    kind: str
    text: str
    cosine: float | None  # cosine similarity to query_vector, None if no vector
    keyword: float  # raw keyword relevance >= 0 (0 = no keyword match)
    published_at: datetime
    content_hash: str


# The query's lexemes, each quoted (quotes and backslashes escaped) and OR-ed into a tsquery, so
# no character of the query is ever a tsquery operator. A scalar subquery: PostgreSQL computes it
# once, and it can be an index condition.
QUERY_TSQUERY = r"""(
    SELECT coalesce(
        string_agg('''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || '''', ' | '),
        ''
    )::tsquery
    FROM unnest(tsvector_to_array(to_tsvector('english', %(query)s))) AS lexeme
)"""
CANDIDATES_SQL = """
WITH dense AS ({dense}),
keyword AS (
    SELECT id FROM memory_knowledgechunk
    WHERE tenant_id = %(tenant)s AND search_vector @@ {tsquery}
    ORDER BY ts_rank_cd(search_vector, {tsquery}) DESC, id
    LIMIT %(limit)s
),
candidates AS (SELECT id FROM dense UNION SELECT id FROM keyword)
SELECT c.id, c.document_id, d.title, d.kind, c.text, {cosine} AS cosine,
       CASE WHEN c.search_vector @@ {tsquery} THEN ts_rank_cd(c.search_vector, {tsquery})
            ELSE 0 END AS keyword,
       d.published_at, c.content_hash, c.heading
FROM candidates JOIN memory_knowledgechunk AS c USING (id)
JOIN memory_knowledgedocument AS d ON d.id = c.document_id
WHERE c.tenant_id = %(tenant)s AND d.published_at IS NOT NULL
ORDER BY cosine DESC NULLS LAST, keyword DESC, c.id
"""
DENSE_SQL = """
    SELECT id FROM memory_knowledgechunk
    WHERE tenant_id = %(tenant)s AND embedding IS NOT NULL
    ORDER BY embedding <=> %(vector)s::vector LIMIT %(limit)s"""
NO_ROWS = "SELECT NULL::bigint AS id WHERE false"


def knowledge_candidates_query(
    *, tenant: Tenant, query: str, query_vector: Sequence[float] | None, limit: int
) -> tuple[str, dict[str, Any]]:
    """The candidate SQL and its parameters (tests read its plan)."""
    semantic = query_vector is not None and len(query_vector) == DIMENSIONS
    sql = CANDIDATES_SQL.format(
        dense=DENSE_SQL if semantic else NO_ROWS,
        cosine=cosine_similarity_sql("c.embedding") if semantic else "NULL::float8",
        tsquery=QUERY_TSQUERY,
    )
    params: dict[str, Any] = {
        "tenant": tenant.pk,
        "query": query,
        "vector": vector_literal(query_vector) if semantic and query_vector is not None else None,
        "limit": limit,
    }
    return sql, params


def _candidate_rows(
    *, tenant: Tenant, query: str, query_vector: Sequence[float] | None, limit: int
) -> list[Any]:
    sql, params = knowledge_candidates_query(
        tenant=tenant, query=query, query_vector=query_vector, limit=limit
    )
    with (
        transaction.atomic(using=read_connection.alias, savepoint=False),
        read_connection.cursor() as cursor,
    ):
        # HNSW with iterative scans (pgvector 0.8): another tenant's chunks never starve the
        # nearest ``limit`` of this one; the index scans on, in exact order, until it has them.
        hnsw_scan_configure(cursor, ef_search=max(40, 2 * limit))
        cursor.execute(sql, params)
        return rows_named(cursor)


def knowledge_candidates(
    *, tenant: Tenant, query: str, query_vector: Sequence[float] | None, limit: int
) -> list[KnowledgeCandidate]:
    """Chunks of the tenant's published articles that may answer ``query``.

    The union of the ``limit`` nearest chunks to ``query_vector`` (HNSW; skipped when there is
    no vector or it has another dimension than the index) and the ``limit`` best keyword matches
    (GIN over the chunk's tsvector, any query word; ``ts_rank_cd`` as the keyword score, title
    and section heading weighted above the text). Every candidate carries its cosine when both
    it and the query have a vector. Ordered by cosine, then keyword score.
    """
    rows = _candidate_rows(tenant=tenant, query=query, query_vector=query_vector, limit=limit)
    return [
        KnowledgeCandidate(
            chunk_id=int(row.id),
            document_id=int(row.document_id),
            title=row.title,
            kind=row.kind,
            text=row.text,
            cosine=None if row.cosine is None else float(row.cosine),
            keyword=float(row.keyword),
            published_at=row.published_at,
            content_hash=row.content_hash,
        )
        for row in rows
    ]


@dataclass(frozen=True)
class KnowledgeHit:
    chunk_id: int
    document_id: int
    title: str
    heading: str
    text: str
    cosine: float | None
    keyword: float
    score: float


@dataclass(frozen=True)
class KnowledgeSearchOutcome:
    hits: list[KnowledgeHit]
    semantic: bool
    took_ms: float


SEARCH_CANDIDATES = 50


def knowledge_search(
    *, tenant: Tenant, query: str, top_k: int, threshold: float | None = None
) -> KnowledgeSearchOutcome:
    """The tenant's published knowledge most relevant to ``query``, best first.

    ``score`` in [0, 1] fuses the two kinds of evidence as memory search's similarity term does.
    A chunk under the similarity threshold that shares no word with the query is dropped;
    chunks with the same text collapse into the best. Without an embedder, keywords alone rank.
    """
    started = time.perf_counter()
    if not query.strip():
        raise ApiError(code="empty_query", message="The query is empty or only whitespace.")
    try:
        vector: list[float] | None = embed_query(query)
    except EmbeddingUnavailable as exc:
        logger.warning("searching the knowledge base by keywords only: %s", exc)
        vector = None
    rows = _candidate_rows(
        tenant=tenant, query=query, query_vector=vector, limit=max(SEARCH_CANDIDATES, top_k)
    )
    # Fused as memory search fuses one source's evidence (memory.search.ranking).
    dense, weight = semantic_evidence(
        [None if row.cosine is None else float(row.cosine) for row in rows],
        settings.SEARCH_DENSE_WEIGHT,
    )
    keyword = minmax([float(row.keyword) for row in rows])
    limit = settings.SEARCH_SIMILARITY_THRESHOLD if threshold is None else threshold
    best: dict[str, KnowledgeHit] = {}
    for row, d, k in zip(rows, dense, keyword, strict=True):
        cosine = None if row.cosine is None else float(row.cosine)
        if float(row.keyword) <= 0 and (cosine is None or cosine < limit):
            continue
        hit = KnowledgeHit(
            chunk_id=int(row.id),
            document_id=int(row.document_id),
            title=row.title,
            heading=row.heading,
            text=row.text,
            cosine=None if cosine is None else round(cosine, 4),
            keyword=round(float(row.keyword), 4),
            score=round(hybrid(d, k, weight), 4),
        )
        kept = best.get(row.content_hash)
        if kept is None or (hit.score, -hit.chunk_id) > (kept.score, -kept.chunk_id):
            best[row.content_hash] = hit
    hits = sorted(best.values(), key=lambda h: (-h.score, h.chunk_id))[:top_k]
    return KnowledgeSearchOutcome(
        hits=hits,
        semantic=vector is not None,
        took_ms=round((time.perf_counter() - started) * 1000, 2),
    )


def skills_for_agent(agent: Agent) -> list[KnowledgeDocument]:
    """The published skills that apply to this agent (those naming it, and those naming no one),
    by title."""
    return list(
        KnowledgeDocument.objects.filter(
            tenant_id=agent.tenant_id, kind=KnowledgeKind.SKILL, published_at__isnull=False
        )
        .filter(Q(applies_to=[]) | Q(applies_to__contains=[agent.name]))
        .order_by("title", "id")
    )


def skill_find(*, tenant: Tenant, reference: int | str) -> KnowledgeDocument:
    """A published skill of the tenant by id or exact title. Another tenant's skill, a draft, an
    article and a missing one are all answered the same: ``unknown_skill``."""
    skills = KnowledgeDocument.objects.filter(
        tenant=tenant, kind=KnowledgeKind.SKILL, published_at__isnull=False
    )
    if isinstance(reference, int):
        found = skills.filter(pk=reference).first()
    else:
        found = skills.filter(title=reference).order_by("id").first()
    if found is None:
        raise ApiError(
            code="unknown_skill",
            message=f"No published skill has the id or title {reference!r}.",
            details={"skill": reference},
        )
    return found
