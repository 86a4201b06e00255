"""The one embedding backfill step: vectors for rows stored while the embedder was unavailable.

Memories (``memory.episodic.services.memory_embeddings_backfill``) and knowledge chunks
(``memory.knowledge.services.knowledge_chunks_embed_backfill``) take it with their own way of
computing vectors; other apps' backfills size their batches by ``EMBEDDING_BACKFILL_BATCH``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db.models import QuerySet

# Rows one backfill call embeds: one bounded step of a job that re-queues itself until a step
# comes back short (ledger.jobs.batches_until_short).
EMBEDDING_BACKFILL_BATCH = 256

# A row's vector and the embedding model that made it.
Embedded = tuple[Any, str]


def vectors_backfill(
    *,
    pending: QuerySet[Any],
    vectors: Callable[[list[Any]], Mapping[int, Embedded]],
    batch_size: int = EMBEDDING_BACKFILL_BATCH,
) -> int:
    """Embed the oldest ``batch_size`` rows of ``pending`` (rows with no ``embedding`` yet) and
    store each vector where the row is still empty. Returns rows filled.

    ``vectors`` maps a row's id to its vector and model, leaving out what it could not embed (the
    embedder down): those rows stay pending for the next run. Bounded per call and idempotent:
    the UPDATE fills only rows still empty, so two workers racing on the same rows write each
    vector once.
    """
    rows = list(pending.order_by("id")[:batch_size])
    if not rows:
        return 0
    filled = 0
    for pk, (vector, model) in vectors(rows).items():
        filled += pending.model.objects.filter(pk=pk, embedding__isnull=True).update(
            embedding=vector, embedding_model=model
        )
    return filled
