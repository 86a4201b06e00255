"""Writes of the embeddings: the semantic index over ledger events, and the embedding backfill
job's work (memories, knowledge chunks, then events)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ledger.jobs import Batch, batches_until_short
from ledger.models import DISPLAYABLE_ANY_KIND_KEYS, Event, Tenant
from memory.embeddings.backends import (
    EmbeddingUnavailable,
    embed_texts,
    embedder_name,
)
from memory.embeddings.backfill import EMBEDDING_BACKFILL_BATCH, derived_vectors_replace
from memory.episodic.services import memory_embeddings_backfill
from memory.knowledge.services import knowledge_chunks_embed_backfill
from memory.models import EventEmbedding

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
        .only("id", "tenant_id", "run_id", "kind", "payload")
        .order_by("id")
        if event.text
    ]
    added = 0
    for start in range(0, len(pending), EVENT_EMBEDDING_BATCH):
        batch = pending[start : start + EVENT_EMBEDDING_BATCH]
        vectors = embed_texts([event.text for event in batch])
        added += derived_vectors_replace(
            table=EventEmbedding,
            key="event_id",
            rows=[
                EventEmbedding(
                    event_id=e.pk, tenant_id=e.tenant_id, run_id=e.run_id, embedding=v, model=model
                )
                for e, v in zip(batch, vectors, strict=True)
            ],
            model=model,
        )
    return added


def event_embeddings_drop(*, tenant: Tenant) -> None:
    EventEmbedding.objects.filter(tenant=tenant).delete()


def events_embeddings_backfill(
    *, after_id: int = 0, batch_size: int = EMBEDDING_BACKFILL_BATCH
) -> tuple[int, int]:
    """Embed the next events (by id, after ``after_id``) with displayable text and no vector.

    Returns (rows added, last id looked at; 0 when none was left). Keyset-paginated so events
    whose payload key holds no usable text are passed over, not fetched again and again.
    Raises ``EmbeddingUnavailable`` when the embedder is down: the next run starts over.
    """
    ids = list(
        Event.objects.filter(pk__gt=after_id, payload__has_any_keys=list(DISPLAYABLE_ANY_KIND_KEYS))
        .exclude(embedding__model=embedder_name())
        .order_by("pk")
        .values_list("pk", flat=True)[:batch_size]
    )
    if not ids:
        return 0, 0
    return event_embeddings_build(event_ids=ids), ids[-1]


def embeddings_backfill_batches() -> Iterator[Batch]:
    """The embedding backfill job's work: memories first (search reads their vectors), then
    knowledge chunks, then events; each part until it is done.

    An unavailable embedder ends the run quietly: nothing is lost, the next run tries again.
    """
    yield from batches_until_short(
        lambda n: memory_embeddings_backfill(batch_size=n), batch_size=EMBEDDING_BACKFILL_BATCH
    )
    yield from batches_until_short(
        lambda n: knowledge_chunks_embed_backfill(batch_size=n), batch_size=EMBEDDING_BACKFILL_BATCH
    )
    after = 0
    while True:
        try:
            added, after = events_embeddings_backfill(
                after_id=after, batch_size=EMBEDDING_BACKFILL_BATCH
            )
        except EmbeddingUnavailable:
            return
        yield Batch(rows=added, more=after != 0)
        if after == 0:
            return
