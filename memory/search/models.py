"""The search's own index table: what a metadata filter's rows are, without reading them."""

from __future__ import annotations

from django.db import models
from pgvector.django import BitField

from ledger.models import Agent, Tenant
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS
from memory.episodic.models import Memory


class MemoryMetadataTerm(models.Model):
    """One top-level metadata key's text or boolean value of one searchable memory, with the
    memory's sign-bit sketch: an index the filtered search reads instead of the table.

    A filter such as ``{"metadata": {"customer": {"in": [five names]}}}`` keeps a few thousand
    of a large agent's rows, each on its own page of the table: reading them to rank them took
    a buffer, five containment checks and a 1.5 kB vector per row (11 ms for 5,099 rows of
    1,100,000, the search's p95 25 ms). This table answers the same question from its primary
    key alone (tenant, agent, term, memory, covering the sketch): the rows ranked by a Hamming
    distance weighted by the query, of which only the nearest few hundred are then read
    (memory.search.legs.FILTERED_BY_TERMS).

    Kept by PostgreSQL (migration 0022), so every path that writes memories keeps it exact: a
    trigger writes a memory's terms when it is inserted and again when its metadata, vector,
    agent or archiving change; the database deletes them with it. Archived memories and those
    without a vector have none (search never returns them). ``term`` is the key and the value
    in their JSON text (``"customer""c0042"``, see ``memory_metadata_terms`` in SQL), so that
    equal terms are exactly equal values: numbers, which JSON compares by value (5 = 5.0), and
    nested values are left to the filter's containment test.
    """

    pk = models.CompositePrimaryKey("tenant", "agent", "term", "memory")
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    agent = models.ForeignKey(
        Agent, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    term = models.TextField()
    # The database deletes the row with its memory (ON DELETE CASCADE, migration 0022), as for
    # memory.consolidation.models.MemoryContentEmbedding, and for the same reasons.
    memory = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    embedding_bits = BitField(length=LOCAL_DIMENSIONS)

    class Meta:
        indexes = [models.Index(fields=["memory"], name="memory_term_memory")]

    def __str__(self) -> str:
        return f"{self.term} of memory {self.memory_id}"
