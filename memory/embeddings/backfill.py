"""The one embedding backfill step: vectors for rows stored while the embedder was unavailable,
and new ones for rows another model embedded (the deployment changed its model).

Memories (``memory.episodic.services.memory_embeddings_backfill``) and knowledge chunks
(``memory.knowledge.services.knowledge_chunks_embed_backfill``) take it with their own way of
computing vectors; other apps' backfills size their batches by ``EMBEDDING_BACKFILL_BATCH``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction
from django.db.models import Model, Q, QuerySet

from memory.embeddings.backends import EmbeddingUnavailable, embedder_name

# Rows one backfill call embeds: one bounded step of a job that re-queues itself until a step
# comes back short (ledger.jobs.batches_until_short).
EMBEDDING_BACKFILL_BATCH = 256

# A row's vector and the embedding model that made it.
Embedded = tuple[Any, str]


def vector_pending() -> Q:
    """Rows the backfill embeds: without a vector, or with one of another model than the
    configured embedder's. Vectors of two models do not compare (the re-quantized local model's
    moved by cosine 0.98-1.00 from the shipped one's), so after a change of model every row is
    embedded again, oldest first; until then search compares the query with the old vectors. A
    vector the client sent names no model and stays."""
    missing = Q(embedding__isnull=True)
    try:
        model = embedder_name()
    except EmbeddingUnavailable:
        return missing  # nothing can be embedded now; the rows' step will say so
    return missing | (~Q(embedding_model="") & ~Q(embedding_model=model))


def vectors_backfill(
    *,
    pending: QuerySet[Any],
    vectors: Callable[[list[Any]], Mapping[int, Embedded]],
    batch_size: int = EMBEDDING_BACKFILL_BATCH,
) -> int:
    """Embed the oldest ``batch_size`` rows of ``pending`` (``vector_pending``) and store each
    vector where the row is still pending. Returns rows filled.

    ``vectors`` maps a row's id to its vector and model, leaving out what it could not embed (the
    embedder down): those rows stay pending for the next run. Bounded per call and idempotent:
    the UPDATE fills only rows still pending, so two workers racing on the same rows write each
    vector once.
    """
    rows = list(pending.order_by("id")[:batch_size])
    if not rows:
        return 0
    filled = 0
    for pk, (vector, model) in vectors(rows).items():
        filled += pending.filter(pk=pk).update(embedding=vector, embedding_model=model)
    return filled


def derived_vectors_replace(*, table: type[Model], key: str, rows: list[Any], model: str) -> int:
    """Write vector rows of a derived table keyed by ``key`` (one row per event, per dissent),
    made by ``model``: rows of another model for the same keys are replaced, a row of this model
    another worker added meanwhile is kept. Returns how many rows were given to write."""
    keys = [getattr(row, key) for row in rows]
    with transaction.atomic():
        table._default_manager.filter(**{f"{key}__in": keys}).exclude(model=model).delete()
        return len(table._default_manager.bulk_create(rows, ignore_conflicts=True))
