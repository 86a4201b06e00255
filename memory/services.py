"""Writes of the memory app."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction

from ledger.models import Event, Tenant
from memory.embeddings import EmbeddingUnavailable, embed_texts, embedder_name
from memory.models import EventEmbedding

logger = logging.getLogger(__name__)

EVENT_EMBEDDING_BATCH = 64


def event_embeddings_build(*, event_ids: Sequence[int]) -> int:
    """Embed the displayable text of these events where the index lacks them. Idempotent.

    Returns how many rows it added. Raises ``EmbeddingUnavailable`` when the embedder is down, so
    a task can retry; the backfill job picks up whatever is still missing later.
    """
    model = embedder_name()
    pending = [
        event
        for event in Event.objects.filter(pk__in=event_ids)
        .exclude(embedding__model=model)
        .only("id", "tenant_id", "run_id", "payload")
        .order_by("id")
        if event.text
    ]
    added = 0
    for start in range(0, len(pending), EVENT_EMBEDDING_BATCH):
        batch = pending[start : start + EVENT_EMBEDDING_BATCH]
        vectors = embed_texts([event.text for event in batch])
        with transaction.atomic():
            # Replace rows of an older model; ignore rows another worker added meanwhile.
            EventEmbedding.objects.filter(event_id__in=[e.pk for e in batch]).exclude(
                model=model
            ).delete()
            created = EventEmbedding.objects.bulk_create(
                [
                    EventEmbedding(
                        event_id=e.pk,
                        tenant_id=e.tenant_id,
                        run_id=e.run_id,
                        embedding=v,
                        model=model,
                    )
                    for e, v in zip(batch, vectors, strict=True)
                ],
                ignore_conflicts=True,
            )
        added += len(created)
    return added


def event_embeddings_drop(*, tenant: Tenant) -> None:
    EventEmbedding.objects.filter(tenant=tenant).delete()


__all__ = ["EmbeddingUnavailable", "event_embeddings_build", "event_embeddings_drop"]
