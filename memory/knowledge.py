"""The knowledge base (SPEC 6): shared documents, their search chunks, and the skills of agents.

A document is an *article* or a *skill*. Published articles are split into chunks
(``memory.chunking``), embedded and indexed for keywords, and found by memory search as its
``knowledge_base`` source, by ``POST /api/v1/kb/search/`` and by working memory. A skill is role
instructions for agents: still a KB document (written, published and logged the same way), but
loaded whole into working memory and never chunked, so it never shows up as a search result.

Every write appends a ``kb.*`` event in the same transaction, after the tenant's ledger lock. The
title and body travel in those events sealed with the document's own key (``memory.sealing``);
deleting a document destroys the key, so its text is gone from the ledger too. The documents and
chunks are a projection of those events (``memory.knowledge_projection``); chunks and vectors are
derived, never logged.

Vectors are computed before a write's transaction (the lock is never held across a model call);
when the embedder is down, chunks are stored without vectors and keyword search still finds them
until ``knowledge_chunks_embed_backfill`` fills them in.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework import status

from config.api import ApiError
from ledger.models import Agent, Tenant
from ledger.services import event_append, tenant_write_lock
from memory.chunking import ChunkDraft, chunk_body
from memory.embeddings import EmbeddingUnavailable, embed_query, embed_texts, embedder_name
from memory.local_embedder import DIMENSIONS
from memory.models import KnowledgeChunk, KnowledgeDocument, KnowledgeKey, KnowledgeKind
from memory.policies import content_hash
from memory.sealing import key_new, seal
from memory.selectors import cosine_similarity_sql, hnsw_scan_configure, vector_literal

logger = logging.getLogger(__name__)

KB_EVENT_KINDS = frozenset(
    {
        "kb.document_created",
        "kb.document_updated",
        "kb.document_published",
        "kb.document_unpublished",
        "kb.document_deleted",
    }
)
KINDS = tuple(KnowledgeKind.values)
TITLE_MAX_CHARS = 300
CATEGORY_MAX_CHARS = 100
APPLIES_TO_MAX = 100
AGENT_NAME_MAX_CHARS = 200
EDITABLE_FIELDS = frozenset({"title", "category", "kind", "body", "applies_to"})
_EMBED_BATCH = 32


# --- Validation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentFields:
    """A document's editable fields, as a client asks to store them."""

    title: str
    body: str
    kind: str = KnowledgeKind.ARTICLE
    category: str = ""
    applies_to: tuple[str, ...] = ()


def _problem(fields: DocumentFields) -> tuple[str, str] | None:
    if not fields.title.strip():
        return "empty_title", "The title is empty or only whitespace."
    if len(fields.title) > TITLE_MAX_CHARS:
        return "title_too_long", f"The title is longer than {TITLE_MAX_CHARS} characters."
    if not fields.body.strip():
        return "empty_body", "The body is empty or only whitespace."
    if len(fields.body) > settings.KB_MAX_BODY_CHARS:
        return (
            "body_too_long",
            f"The body has {len(fields.body)} characters; the limit is "
            f"{settings.KB_MAX_BODY_CHARS}.",
        )
    if len(fields.category) > CATEGORY_MAX_CHARS:
        return "category_too_long", f"The category is longer than {CATEGORY_MAX_CHARS} characters."
    if fields.kind not in KINDS:
        return "invalid_kind", f"Unknown kind {fields.kind!r}; use one of {', '.join(KINDS)}."
    if any("\x00" in text for text in (fields.title, fields.body, fields.category)):
        return "invalid_text", "Text must not contain NUL characters (\\u0000)."
    if fields.applies_to and fields.kind != KnowledgeKind.SKILL:
        return (
            "invalid_applies_to",
            "applies_to names agents for skills only; articles are for every agent.",
        )
    names = fields.applies_to
    if len(names) > APPLIES_TO_MAX or not all(
        isinstance(name, str) and name.strip() and len(name) <= AGENT_NAME_MAX_CHARS
        for name in names
    ):
        return (
            "invalid_applies_to",
            f"applies_to is a list of at most {APPLIES_TO_MAX} agent names, each 1 to "
            f"{AGENT_NAME_MAX_CHARS} characters.",
        )
    return None


def _validate(fields: DocumentFields) -> None:
    problem = _problem(fields)
    if problem is not None:
        code, message = problem
        raise ApiError(code=code, message=message)


def _fields_of(document: KnowledgeDocument) -> DocumentFields:
    return DocumentFields(
        title=document.title,
        body=document.body,
        kind=document.kind,
        category=document.category,
        applies_to=tuple(document.applies_to),
    )


# --- Chunks --------------------------------------------------------------------------------------

ChunkKey = tuple[str, str]
ChunkVectors = dict[ChunkKey, tuple[list[float], str]]


def document_chunks(document: KnowledgeDocument) -> list[ChunkDraft]:
    """The chunks a document should have: a published article's pieces; nothing otherwise."""
    if document.published_at is None or document.kind != KnowledgeKind.ARTICLE:
        return []
    return chunk_body(title=document.title, body=document.body)


def chunk_vectors(drafts: Sequence[ChunkDraft], *, document_id: int | None = None) -> ChunkVectors:
    """Vectors for these chunks, keyed by (heading, text): reused from the document's stored
    chunks where the text is unchanged, else embedded now. Chunks the embedder cannot serve
    (it is down, or answers another dimension than the column's) are simply absent."""
    found: ChunkVectors = {}
    try:
        model = embedder_name()
    except EmbeddingUnavailable as exc:
        logger.warning("knowledge chunks stored without vectors for now: %s", exc)
        model = None
    if document_id is not None:
        stored = KnowledgeChunk.objects.filter(
            document_id=document_id, embedding__isnull=False
        ).only("heading", "text", "embedding", "embedding_model")
        for chunk in stored:
            if model is None or chunk.embedding_model == model:
                found[(chunk.heading, chunk.text)] = (list(chunk.embedding), chunk.embedding_model)
    if model is None:
        return found
    missing = list({(d.heading, d.text): d for d in drafts if (d.heading, d.text) not in found})
    by_key = {(d.heading, d.text): d for d in drafts}
    try:
        for start in range(0, len(missing), _EMBED_BATCH):
            batch = missing[start : start + _EMBED_BATCH]
            vectors = embed_texts([by_key[key].embedding_text for key in batch])
            for key, vector in zip(batch, vectors, strict=True):
                if len(vector) == DIMENSIONS:
                    found[key] = (vector, model)
    except EmbeddingUnavailable as exc:
        logger.warning("knowledge chunks stored without vectors for now: %s", exc)
    return found


def knowledge_chunks_sync(*, document: KnowledgeDocument, vectors: ChunkVectors) -> int:
    """Make the document's chunk rows what ``document_chunks`` says (inside a transaction).

    A chunk whose position, heading and text are unchanged keeps its row (its id and vector);
    the others are replaced, with vectors from ``vectors`` where present. Returns the count.
    """
    drafts = document_chunks(document)
    wanted = {draft.position: draft for draft in drafts}
    kept: set[int] = set()
    stale: list[int] = []
    for chunk in KnowledgeChunk.objects.filter(document=document).only(
        "id", "position", "heading", "text", "embedding_model"
    ):
        draft = wanted.get(chunk.position)
        if draft is not None and (draft.heading, draft.text) == (chunk.heading, chunk.text):
            kept.add(chunk.position)
            vector = vectors.get((draft.heading, draft.text))
            if vector is not None:
                KnowledgeChunk.objects.filter(pk=chunk.pk, embedding__isnull=True).update(
                    embedding=vector[0], embedding_model=vector[1]
                )
        else:
            stale.append(chunk.pk)
    if stale:
        KnowledgeChunk.objects.filter(pk__in=stale).delete()
    rows = []
    for draft in drafts:
        if draft.position in kept:
            continue
        found = vectors.get((draft.heading, draft.text))
        rows.append(
            KnowledgeChunk(
                tenant_id=document.tenant_id,
                document=document,
                position=draft.position,
                heading=draft.heading,
                text=draft.text,
                content_hash=content_hash(draft.text),
                embedding=found[0] if found else None,
                embedding_model=found[1] if found else "",
            )
        )
    KnowledgeChunk.objects.bulk_create(rows)
    return len(drafts)


def knowledge_chunks_embed_backfill(*, batch_size: int = 256) -> int:
    """Embed chunks stored while the embedder was unavailable. Returns rows filled.

    Bounded per call and idempotent: the UPDATE fills only rows still empty, so two workers
    racing on the same rows write each vector once.
    """
    pending = list(
        KnowledgeChunk.objects.filter(embedding__isnull=True)
        .order_by("id")
        .only("id", "position", "heading", "text")[:batch_size]
    )
    if not pending:
        return 0
    drafts = [ChunkDraft(c.position, c.heading, c.text) for c in pending]
    vectors = chunk_vectors(drafts)
    filled = 0
    for chunk in pending:
        vector = vectors.get((chunk.heading, chunk.text))
        if vector is not None:
            filled += KnowledgeChunk.objects.filter(pk=chunk.pk, embedding__isnull=True).update(
                embedding=vector[0], embedding_model=vector[1]
            )
    return filled


# --- Writes --------------------------------------------------------------------------------------


def _sealed(document: KnowledgeDocument, key: str) -> str:
    return seal(
        key=key,
        document={
            "title": document.title,
            "body": document.body,
            "content_hash": document.content_hash,
        },
    )


def _locked(document: KnowledgeDocument) -> KnowledgeDocument:
    """The document's current row, locked for this transaction (after the tenant's lock)."""
    tenant_write_lock(document.tenant)
    current = KnowledgeDocument.objects.select_for_update().filter(pk=document.pk).first()
    if current is None:  # deleted meanwhile
        raise ApiError(
            code="not_found", message="No such object.", status_code=status.HTTP_404_NOT_FOUND
        )
    return current


def _publish(document: KnowledgeDocument, *, actor: str, vectors: ChunkVectors) -> None:
    now = timezone.now()
    document.published_at = now
    document.updated_at = now
    document.save(update_fields=["published_at", "updated_at"])
    chunks = knowledge_chunks_sync(document=document, vectors=vectors)
    event_append(
        tenant=document.tenant,
        kind="kb.document_published",
        actor=actor,
        payload={"document_id": document.pk, "published_at": now.isoformat(), "chunks": chunks},
    )


def _vectors_if_published(
    fields: DocumentFields, *, published: bool, document_id: int | None = None
) -> ChunkVectors:
    if not published or fields.kind != KnowledgeKind.ARTICLE:
        return {}
    return chunk_vectors(chunk_body(title=fields.title, body=fields.body), document_id=document_id)


def knowledge_document_create(
    *, tenant: Tenant, fields: DocumentFields, actor: str, publish: bool = False
) -> KnowledgeDocument:
    """Write a document, as a draft or (``publish``) published at once; nothing if it is invalid."""
    _validate(fields)
    vectors = _vectors_if_published(fields, published=publish)
    now = timezone.now()
    with transaction.atomic():
        tenant_write_lock(tenant)
        document = KnowledgeDocument.objects.create(
            tenant=tenant,
            title=fields.title,
            body=fields.body,
            kind=fields.kind,
            category=fields.category,
            applies_to=list(fields.applies_to),
            content_hash=content_hash(fields.body),
            created_at=now,
            updated_at=now,
        )
        key = KnowledgeKey.objects.create(document_id=document.pk, tenant=tenant, key=key_new())
        event_append(
            tenant=tenant,
            kind="kb.document_created",
            actor=actor,
            payload={
                "document_id": document.pk,
                "kind": document.kind,
                "category": document.category,
                "applies_to": list(document.applies_to),
                "sealed": _sealed(document, key.key),
            },
        )
        if publish:
            _publish(document, actor=actor, vectors=vectors)
    return document


def knowledge_document_update(
    *, document: KnowledgeDocument, actor: str, changes: dict[str, Any]
) -> KnowledgeDocument:
    """Change a document. A published article is re-chunked (unchanged chunks keep their rows)."""
    unknown = set(changes) - EDITABLE_FIELDS
    if unknown:
        raise ApiError(
            code="field_not_editable", message=f"Cannot change: {', '.join(sorted(unknown))}."
        )
    if "applies_to" in changes:
        changes = {**changes, "applies_to": list(changes["applies_to"])}

    def merged(base: KnowledgeDocument) -> DocumentFields:
        fields = replace(_fields_of(base), **changes)
        return replace(fields, applies_to=tuple(fields.applies_to))

    _validate(merged(document))
    vectors = _vectors_if_published(
        merged(document), published=document.published, document_id=document.pk
    )
    with transaction.atomic():
        current = _locked(document)
        fields = merged(current)
        _validate(fields)  # against the row as it is now, if someone changed it meanwhile
        changed = {
            name: value for name, value in changes.items() if getattr(current, name) != value
        }
        if not changed:
            return current
        for name, value in changed.items():
            setattr(current, name, value)
        current.content_hash = content_hash(current.body)
        current.updated_at = timezone.now()
        current.save()
        if current.published:
            knowledge_chunks_sync(document=current, vectors=vectors)
        clear = {name: value for name, value in changed.items() if name not in ("title", "body")}
        if "title" in changed or "body" in changed:
            key = KnowledgeKey.objects.get(document_id=current.pk).key
            clear["sealed"] = _sealed(current, key)
        event_append(
            tenant=current.tenant,
            kind="kb.document_updated",
            actor=actor,
            payload={"document_id": current.pk, "changes": clear},
        )
    return current


def knowledge_document_publish(*, document: KnowledgeDocument, actor: str) -> KnowledgeDocument:
    """Publish a draft: an article is split into chunks and embedded. Publishing a published
    document changes nothing and logs nothing."""
    vectors = _vectors_if_published(
        _fields_of(document), published=not document.published, document_id=document.pk
    )
    with transaction.atomic():
        current = _locked(document)
        if not current.published:
            _publish(current, actor=actor, vectors=vectors)
    return current


def knowledge_document_unpublish(*, document: KnowledgeDocument, actor: str) -> KnowledgeDocument:
    """Take a document back to draft: its chunks leave search at once. Idempotent."""
    with transaction.atomic():
        current = _locked(document)
        if current.published:
            current.published_at = None
            current.updated_at = timezone.now()
            current.save(update_fields=["published_at", "updated_at"])
            knowledge_chunks_sync(document=current, vectors={})
            event_append(
                tenant=current.tenant,
                kind="kb.document_unpublished",
                actor=actor,
                payload={"document_id": current.pk},
            )
    return current


def knowledge_document_delete(*, document: KnowledgeDocument, actor: str) -> None:
    """Delete a document for good: its rows, and the key that opens its text in the ledger."""
    with transaction.atomic():
        current = _locked(document)
        event_append(
            tenant=current.tenant,
            kind="kb.document_deleted",
            actor=actor,
            payload={"document_id": current.pk, "kind": current.kind},
        )
        KnowledgeKey.objects.filter(document_id=current.pk).delete()
        current.delete()


# --- Reads ---------------------------------------------------------------------------------------


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
) -> list[tuple[Any, ...]]:
    sql, params = knowledge_candidates_query(
        tenant=tenant, query=query, query_vector=query_vector, limit=limit
    )
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        # HNSW with iterative scans (pgvector 0.8): another tenant's chunks never starve the
        # nearest ``limit`` of this one; the index scans on, in exact order, until it has them.
        hnsw_scan_configure(cursor, ef_search=max(40, 2 * limit))
        cursor.execute(sql, params)
        return list(cursor.fetchall())


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
            chunk_id=int(row[0]),
            document_id=int(row[1]),
            title=row[2],
            kind=row[3],
            text=row[4],
            cosine=None if row[5] is None else float(row[5]),
            keyword=float(row[6]),
            published_at=row[7],
            content_hash=row[8],
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


# Memory search's fusion (docs/search.md): this share of the min-max normalised cosine, the rest
# of the min-max normalised keyword score.
DENSE_WEIGHT = 0.5
SEARCH_CANDIDATES = 50


def _minmax(values: Sequence[float]) -> list[float]:
    if not values:
        return []
    low, high = min(values), max(values)
    if math.isclose(high, low):
        return [1.0 if high > 0 else 0.0 for _ in values]
    return [(value - low) / (high - low) for value in values]


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
    cosines = [float(row[5]) for row in rows if row[5] is not None]
    floor = min(cosines, default=0.0)
    dense = _minmax([float(row[5]) if row[5] is not None else floor for row in rows])
    keyword = _minmax([float(row[6]) for row in rows])
    weight = DENSE_WEIGHT if cosines else 0.0
    limit = settings.SEARCH_SIMILARITY_THRESHOLD if threshold is None else threshold
    best: dict[str, KnowledgeHit] = {}
    for row, d, k in zip(rows, dense, keyword, strict=True):
        cosine = None if row[5] is None else float(row[5])
        if float(row[6]) <= 0 and (cosine is None or cosine < limit):
            continue
        hit = KnowledgeHit(
            chunk_id=int(row[0]),
            document_id=int(row[1]),
            title=row[2],
            heading=row[9],
            text=row[4],
            cosine=None if cosine is None else round(cosine, 4),
            keyword=round(float(row[6]), 4),
            score=round(weight * d + (1 - weight) * k, 4),
        )
        kept = best.get(row[8])
        if kept is None or (hit.score, -hit.chunk_id) > (kept.score, -kept.chunk_id):
            best[row[8]] = hit
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
