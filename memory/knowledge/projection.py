"""The knowledge base as a projection of the ledger, registered in ``MemoryConfig.ready``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from ledger.models import Event, Tenant
from ledger.projections import AGENT_DELETED
from ledger.services import tenant_write_lock
from memory.episodic.sealing import unseal
from memory.knowledge.services import (
    KB_EVENT_KINDS,
    ChunkVectors,
    chunk_vectors,
    document_chunks,
    knowledge_chunks_sync,
)
from memory.models import KnowledgeChunk, KnowledgeDocument, KnowledgeKey

# What a rebuild compares. Chunks are compared by what they say, not by id: a chunk that had to
# be re-made still counts as the same chunk.
_DOCUMENT_FIELDS = (
    "title",
    "category",
    "kind",
    "body",
    "content_hash",
    "applies_to",
    "published_at",
)
_CHUNK_FIELDS = ("document_id", "position", "heading", "text", "content_hash")


class KnowledgeProjection:
    """Documents replayed from ``kb.*`` events; chunks and vectors derived from them in
    ``finish``, keeping every chunk row (and vector) that is already right.

    Title and body come back by opening each event's sealed text with the document's key; a
    document whose key was destroyed (deleted) stays gone.
    """

    name = "knowledge_base"
    owned_kinds = KB_EVENT_KINDS
    indexes_all_kinds = False

    def __init__(self) -> None:
        self._replayed: dict[int, dict[str, Any]] = {}

    def snapshot(self, *, tenant: Tenant) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        documents = KnowledgeDocument.objects.filter(tenant=tenant).order_by("id")
        chunks = KnowledgeChunk.objects.filter(tenant=tenant).order_by("document_id", "position")
        return (
            list(documents.values_list("id", *_DOCUMENT_FIELDS)),
            list(chunks.values_list(*_CHUNK_FIELDS)),
        )

    def reset(self, *, tenant: Tenant) -> None:
        self._replayed = {}

    def apply(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        # The knowledge base is the tenant's: deleting an agent removes nothing of it (a skill
        # naming the agent keeps the name in ``applies_to``).
        events = [event for event in events if event.kind != AGENT_DELETED]
        ids = [int(event.payload["document_id"]) for event in events]
        keys = dict(
            KnowledgeKey.objects.filter(tenant=tenant, document_id__in=ids).values_list(
                "document_id", "key"
            )
        )
        for event in events:
            document_id = int(event.payload["document_id"])
            if event.kind == "kb.document_created":
                if document_id in keys:
                    self._replayed[document_id] = {
                        "kind": event.payload["kind"],
                        "category": event.payload["category"],
                        "applies_to": list(event.payload["applies_to"]),
                        **unseal(key=keys[document_id], sealed=event.payload["sealed"]),
                        "published_at": None,
                        "created_at": event.created_at,
                        "updated_at": event.created_at,
                    }
                continue
            values = self._replayed.get(document_id)
            if values is None:
                continue
            if event.kind == "kb.document_deleted":
                del self._replayed[document_id]
            elif event.kind == "kb.document_updated":
                changes = dict(event.payload["changes"])
                sealed = changes.pop("sealed", None)
                if sealed is not None:
                    values.update(unseal(key=keys[document_id], sealed=sealed))
                values.update(changes)
                values["updated_at"] = event.created_at
            elif event.kind == "kb.document_published":
                values["published_at"] = parse_datetime(event.payload["published_at"])
                values["updated_at"] = values["published_at"]
            elif event.kind == "kb.document_unpublished":
                values["published_at"] = None
                values["updated_at"] = event.created_at

    def finish(self, *, tenant: Tenant) -> None:
        documents = {
            document_id: KnowledgeDocument(id=document_id, tenant=tenant, **values)
            for document_id, values in self._replayed.items()
        }
        # Embedding happens before the transaction, as in the services: the tenant's lock is
        # never held across a model call. Unchanged chunks reuse their stored vectors.
        vectors: dict[int, ChunkVectors] = {
            document_id: chunk_vectors(document_chunks(document), document_id=document_id)
            for document_id, document in documents.items()
            if document_chunks(document)
        }
        with transaction.atomic():
            tenant_write_lock(tenant)
            existing = {d.pk: d for d in KnowledgeDocument.objects.filter(tenant=tenant)}
            KnowledgeDocument.objects.filter(tenant=tenant).exclude(pk__in=documents).delete()
            for document_id, document in documents.items():
                found = existing.get(document_id)
                if found is None:
                    document.save(force_insert=True)
                elif any(
                    getattr(found, name) != getattr(document, name) for name in _DOCUMENT_FIELDS
                ):
                    document.save(force_update=True)
                knowledge_chunks_sync(document=document, vectors=vectors.get(document_id, {}))
        self._replayed = {}

    def after_append(self, *, event_ids: Sequence[int]) -> None:
        """Documents are written by their services, not after the fact."""
