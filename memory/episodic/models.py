"""Episodic memories' tables (SPEC 4): memories, their content keys, and the BM25 statistics of
their keyword documents."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models.functions import Cast
from django.utils import timezone
from pgvector.django import BitField, HnswIndex, VectorField

from ledger.models import Agent, Tenant
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS

if TYPE_CHECKING:
    from memory.consolidation.services import Consolidation


class MemoryRole(models.TextChoices):
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    SYSTEM = "system", "System"
    TOOL_RESULT = "tool_result", "Tool result"


class MemoryQuerySet(models.QuerySet["Memory"]):
    def active(self, *, now: datetime | None = None) -> MemoryQuerySet:
        """Memories that may be returned: not archived and not expired, whatever the jobs did."""
        moment = now or timezone.now()
        return self.filter(archived_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=moment)
        )


def speaker_of(*, role: str, metadata: dict[str, Any], inferred: str = "") -> str:
    """Who said it, as the embedder is told: the ``speaker`` metadata, else the speaker inferred
    from its session (``Memory.speaker``), else the role."""
    return str(metadata.get("speaker") or inferred or role)


class Memory(models.Model):
    """One episodic memory of one agent (SPEC 4).

    A projection of ``memory.*`` events. The content travels in those events sealed with a key of
    its own (``MemoryKey``), so deleting a memory for a data-subject request destroys the key and
    leaves the immutable ledger holding only ciphertext nobody can open.
    """

    # No index of its own: every composite index below starts with the tenant, and each index
    # is one more entry to write whenever a memory is updated.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    session_id = models.CharField(max_length=200, blank=True, default="")
    role = models.CharField(max_length=16, choices=MemoryRole.choices, default=MemoryRole.USER)
    content = models.TextField()
    memory_type = models.CharField(max_length=32)
    importance = models.FloatField()
    embedding = VectorField(dimensions=LOCAL_DIMENSIONS, null=True, blank=True)
    # The embedding's signs, one bit per dimension (48 bytes), kept by PostgreSQL. A small
    # agent's search reads these from the covering index memory_agent_sketch, ranks them by
    # Hamming distance and computes exact distances for the nearest few hundred only, instead
    # of reading every row of the agent (memory.search.plans.SemanticPlan.SKETCH).
    embedding_bits = models.GeneratedField(
        expression=Cast(
            models.Func(models.F("embedding"), function="binary_quantize"),
            output_field=BitField(length=LOCAL_DIMENSIONS),
        ),
        output_field=BitField(length=LOCAL_DIMENSIONS),
        db_persist=True,
    )
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    # What the search's ranking reads of the text itself: whether it carries a time (the time
    # evidence for questions asking when) and whether it asks a question (the question
    # penalty). As regular expressions over a search's ~200 candidates they cost PostgreSQL
    # 20 µs a row, 3.6 ms per question asking when. Kept by a trigger as a row is inserted or its
    # content changes (migration 0025: SQL functions memory_mentions_time, memory_asks_question);
    # null in rows written before it, which the search then matches as before.
    mentions_time = models.BooleanField(null=True, editable=False)
    asks_question = models.BooleanField(null=True, editable=False)
    content_hash = models.CharField(max_length=64)
    # Both STORAGE MAIN (migration 0020): kept in the row beside the vector, because a filter on
    # them checks again every row its GIN index names, and with a TOAST fetch per check a
    # selective metadata filter read 3.5 buffers per row instead of one.
    metadata = models.JSONField(default=dict, blank=True)
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    occurred_at = models.DateTimeField(help_text="When it happened; the store time by default.")
    # The fact's validity interval (valid time, as Zep's bi-temporal facts; created_at is the
    # transaction time). valid_from defaults to occurred_at; valid_until is set when a later
    # memory supersedes this one (memory.consolidation), and then default search and working
    # memory leave it out while `as_of` still finds it.
    valid_from = models.DateTimeField(help_text="From when the fact holds; occurred_at by default.")
    valid_until = models.DateTimeField(
        null=True, blank=True, help_text="Until when the fact held; null while it holds."
    )
    # The id of the memory that superseded this one; an id, not a foreign key, because expiry
    # deletes memories with set-based SQL that must not trip on (or cascade to) references.
    superseded_by = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    last_retrieved_at = models.DateTimeField(null=True, blank=True)
    retrieval_count = models.PositiveIntegerField(default=0)
    archived_at = models.DateTimeField(null=True, blank=True)
    # The keyword document: this memory with up to two neighbours on each side in its session
    # (memory.search.keyword_index keeps it current). ``search_length`` counts its lexeme positions,
    # the document length of Okapi BM25.
    search_vector = SearchVectorField(null=True, blank=True)
    # Who said it, as search reads it (the keyword line, the embedding text): the speaker the
    # client gave in the metadata, else the one its session shows (memory.episodic.speakers),
    # else blank (the role stands). Derived, like the vector and the keyword document.
    speaker = models.CharField(max_length=200, blank=True, default="")
    search_length = models.PositiveIntegerField(default=0)

    objects = MemoryQuerySet.as_manager()
    # Not a column: what consolidation made of the memory as it was stored (memories_store).
    consolidation: Consolidation | None = None

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "agent", "created_at"], name="memory_agent_created"),
            models.Index(fields=["tenant", "agent", "content_hash"], name="memory_agent_hash"),
            # With the id, "the turn before/after this one" is one index probe even when a whole
            # session shares a timestamp (a batch stored at once does).
            models.Index(
                fields=["tenant", "agent", "session_id", "occurred_at", "id"],
                name="memory_session",
            ),
            # Index-only: everything an unfiltered nearest-memories query of one agent reads.
            models.Index(
                fields=["tenant", "agent"],
                include=["id", "expires_at", "valid_from", "valid_until", "embedding_bits"],
                condition=models.Q(archived_at__isnull=True),
                name="memory_agent_sketch",
            ),
            # Filters (memory.search.filters): occurred_at windows of one agent, and metadata
            # keys by value (@>) or path (@?), jsonb_path_ops being the smaller, faster GIN for
            # exactly those operators. A selective filter's rows come from these, sorted by
            # distance exactly (memory.search.legs.filtered_exact_max_rows).
            models.Index(fields=["tenant", "agent", "occurred_at"], name="memory_agent_occurred"),
            GinIndex(
                fields=["metadata"],
                opclasses=["jsonb_path_ops"],
                name="memory_metadata",
                fastupdate=False,
            ),
            GinIndex(fields=["tags"], name="memory_tags", fastupdate=False),
            # Each keyword document's lexemes keyed by the agent ("43:budget"), so the keyword leg
            # reads the postings of one agent's lexemes only. A GIN index over (agent, document)
            # is never used with the agent as a key (the planner reads the agent through a B-tree
            # and ANDs in every row of the table holding the lexeme: 5-12 ms at 2,000,000 rows,
            # against 0.1 ms here).
            # Every GIN index here, and the audit log's and the knowledge base's, is written
            # in place (fastupdate off): PostgreSQL's default queues new entries in a pending
            # list that every scan reads whole until a vacuum merges it, so under a steady
            # stream of stores a search's keyword lookup grew from 0.03 to 0.86 ms after 200
            # stores, and the store that filled the list (4 MB) paid for merging all of it.
            GinIndex(
                models.Func(
                    models.F("agent"),
                    models.F("search_vector"),
                    function="memory_agent_lexemes",
                    output_field=ArrayField(models.TextField()),
                ),
                name="memory_agent_lexemes",
                fastupdate=False,
            ),
            # Archived memories are never searched, and leaving them out means archiving (decay,
            # quota) writes the row's new version without a new graph node, the costliest part
            # of an update on this table. A build list of 128 (pgvector's default is 64): on
            # 2,000,000 clustered vectors a graph built with 64 left some topics unreachable
            # (a query there found 1 of its 10 nearest; recall@10 0.85 at ef_search 400).
            HnswIndex(
                name="memory_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=128,
                opclasses=["vector_cosine_ops"],
                condition=models.Q(archived_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"memory {self.pk} of agent {self.agent_id}"

    @property
    def speaker_named(self) -> str:
        """The speaker as the embedding text names it (``speaker_of``)."""
        return speaker_of(role=self.role, metadata=self.metadata, inferred=self.speaker)


class MemoryTerm(models.Model):
    """Document frequency of one lexeme among one agent's keyword documents (BM25's idf).

    Kept by statement-level triggers on ``memory_memory`` (migration 0004), so every path that
    writes memories (services, lifecycle jobs, projection rebuilds, bulk loads) keeps it exact.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    lexeme = models.TextField()
    df = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "lexeme"], name="memoryterm_agent_lexeme")
        ]

    def __str__(self) -> str:
        return f"{self.lexeme!r} in {self.df} memories of agent {self.agent_id}"


class MemorySearchTotals(models.Model):
    """How many keyword documents an agent has and their total length (BM25's N and avgdl)."""

    agent = models.OneToOneField(
        Agent, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    documents = models.BigIntegerField(default=0)
    positions = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.documents} keyword documents of agent {self.agent_id}"


class MemoryKey(models.Model):
    """The key that opens a memory's content in the ledger. Deleted with the memory, on purpose:
    without it the content sealed in ``memory.*`` events can no longer be read (crypto-shredding).
    """

    memory_id = models.BigIntegerField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"key of memory {self.memory_id}"
