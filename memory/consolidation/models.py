"""Consolidation's table: each memory's vector of its content alone."""

from __future__ import annotations

from django.db import models
from pgvector.django import VectorField

from ledger.models import Tenant
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS
from memory.episodic.models import Memory


class MemoryContentEmbedding(models.Model):
    """The vector of a memory's content without the "[date] speaker:" frame its search vector
    carries: whether a new memory replaces an older one is a question about their content
    (``memory.consolidation.services``), and without this row each store embedded every
    hopeful neighbour's content again.

    Derived data, written the first time consolidation embeds a content: used only while the
    memory's ``content_hash`` and the embedder are the ones it was made from, gone with its
    memory (deletion cascades), safe to drop.
    """

    # The database deletes the row with its memory (ON DELETE CASCADE, migration 0021), not
    # Django: a relation Django cascades would stop every bulk delete of memories (an agent's,
    # a tenant's, a purge) from being one statement, and reorder an agent's deletion so that
    # the keyword triggers wrote terms for an agent already gone. Checked at once, not at the
    # commit, so a vector kept for a memory deleted meanwhile fails only its own savepoint.
    memory = models.OneToOneField(
        Memory,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        primary_key=True,
        related_name="+",
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    content_hash = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    embedding = VectorField(dimensions=LOCAL_DIMENSIONS)

    def __str__(self) -> str:
        return f"content embedding of memory {self.memory_id}"
