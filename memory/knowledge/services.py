"""The knowledge base (SPEC 6): shared documents, their search chunks, and the skills of agents.

A document is an *article* or a *skill*. Published articles are split into chunks
(``memory.knowledge.chunking``), embedded and indexed for keywords, and found by memory search as
its ``knowledge_base`` source, by ``POST /api/v1/kb/search/`` and by working memory. A skill is role
instructions for agents: still a KB document (written, published and logged the same way), but
loaded whole into working memory and never chunked, so it never shows up as a search result.

Every write appends a ``kb.*`` event in the same transaction, after the tenant's ledger lock. The
title and body travel in those events sealed with the document's own key
(``memory.episodic.sealing``); deleting a document destroys the key, so its text is gone from the
ledger too. The documents and chunks are a projection of those events
(``memory.knowledge.projection``); chunks and vectors are derived, never logged.

Vectors are computed before a write's transaction (the lock is never held across a model call);
when the embedder is down, chunks are stored without vectors and keyword search still finds them
until ``knowledge_chunks_embed_backfill`` fills them in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rest_framework import status

from config.api import ApiError
from ledger.models import Tenant
from ledger.services import event_append, tenant_write_lock
from memory.embeddings.backends import EmbeddingUnavailable, embed_texts, embedder_name
from memory.embeddings.backfill import (
    EMBEDDING_BACKFILL_BATCH,
    Embedded,
    vector_pending,
    vectors_backfill,
)
from memory.embeddings.local_embedder import DIMENSIONS
from memory.episodic.policies import content_hash
from memory.episodic.sealing import key_new, seal
from memory.knowledge.chunking import ChunkDraft, chunk_body
from memory.models import KnowledgeChunk, KnowledgeDocument, KnowledgeKey, KnowledgeKind

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


def knowledge_chunks_embed_backfill(*, batch_size: int = EMBEDDING_BACKFILL_BATCH) -> int:
    """Embed chunks stored while the embedder was unavailable, or embedded by another model.
    Returns rows filled."""
    return vectors_backfill(
        pending=KnowledgeChunk.objects.filter(vector_pending()).only(
            "id", "position", "heading", "text"
        ),
        vectors=_chunk_vectors_by_id,
        batch_size=batch_size,
    )


def _chunk_vectors_by_id(chunks: list[KnowledgeChunk]) -> dict[int, Embedded]:
    vectors = chunk_vectors([ChunkDraft(c.position, c.heading, c.text) for c in chunks])
    return {
        chunk.pk: vectors[(chunk.heading, chunk.text)]
        for chunk in chunks
        if (chunk.heading, chunk.text) in vectors
    }


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
