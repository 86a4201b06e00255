"""Memory's tables. Each is a projection of the ledger or data derived from it."""

from __future__ import annotations

from datetime import datetime

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models.functions import Cast
from django.utils import timezone
from pgvector.django import BitField, HnswIndex, VectorField

from ledger.models import Agent, Event, Tenant
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS


class EventEmbedding(models.Model):
    """The semantic index over ledger events: one vector per event with displayable text.

    Derived data keyed by the event: filled after commit by a Celery task, rebuilt by
    ``rebuild_projections``, and safe to drop; recall falls back to keyword relevance without it.
    """

    event = models.OneToOneField(
        Event, on_delete=models.CASCADE, primary_key=True, related_name="embedding"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    # Copied from the event so recall reads one run's vectors with a single index range scan.
    run_id = models.CharField(max_length=200, blank=True, default="")
    # Unsized: recall compares an event only with the query of its own run (no ANN index), and
    # a deployment may switch embedding models without a schema change.
    embedding = VectorField()
    model = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "run_id", "model"], name="eventembedding_run"),
            # Search's semantic leg over the audit log reads the tenant's newest vectors.
            models.Index(fields=["tenant", "model", "event"], name="eventembedding_newest"),
        ]

    def __str__(self) -> str:
        return f"embedding of event {self.event_id}"


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
    content_hash = models.CharField(max_length=64)
    metadata = models.JSONField(default=dict, blank=True)
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    occurred_at = models.DateTimeField(help_text="When it happened; the store time by default.")
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
    search_length = models.PositiveIntegerField(default=0)

    objects = MemoryQuerySet.as_manager()

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
                include=["id", "expires_at", "embedding_bits"],
                condition=models.Q(archived_at__isnull=True),
                name="memory_agent_sketch",
            ),
            GinIndex(fields=["tags"], name="memory_tags"),
            # Each keyword document's lexemes keyed by the agent ("43:budget"), so the keyword leg
            # reads the postings of one agent's lexemes only. A GIN index over (agent, document)
            # is never used with the agent as a key (the planner reads the agent through a B-tree
            # and ANDs in every row of the table holding the lexeme: 5-12 ms at 2,000,000 rows,
            # against 0.1 ms here).
            GinIndex(
                models.Func(
                    models.F("agent"),
                    models.F("search_vector"),
                    function="memory_agent_lexemes",
                    output_field=ArrayField(models.TextField()),
                ),
                name="memory_agent_lexemes",
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


# --- Knowledge base (SPEC 6) ---------------------------------------------------------------------


class KnowledgeKind(models.TextChoices):
    ARTICLE = "article", "Article"
    # Role instructions, loaded whole into an agent's working memory; never chunked.
    SKILL = "skill", "Skill"


class KnowledgeDocument(models.Model):
    """A document of the tenant's shared knowledge base: an article, or a skill.

    A projection of ``kb.*`` events (``memory.knowledge.services``). Title and body travel in those
    events sealed with the document's own key (``KnowledgeKey``), like memories, so deleting a
    document really deletes what it said. Published articles are split into ``KnowledgeChunk`` rows
    for search; skills are loaded whole and have no chunks.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    title = models.CharField(max_length=300)
    category = models.CharField(max_length=100, blank=True, default="")
    kind = models.CharField(
        max_length=16, choices=KnowledgeKind.choices, default=KnowledgeKind.ARTICLE
    )
    body = models.TextField()
    content_hash = models.CharField(max_length=64, help_text="Of the body.")
    # Skills only: the names of the agents the skill is for; empty means every agent.
    applies_to = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    published_at = models.DateTimeField(null=True, blank=True, help_text="Null: a draft.")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "kind", "published_at"], name="kbdocument_kind"),
            models.Index(fields=["tenant", "category"], name="kbdocument_category"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.title!r}"

    @property
    def published(self) -> bool:
        return self.published_at is not None


class KnowledgeChunk(models.Model):
    """One searchable piece of a published article, derived from it on publish (and on a
    rebuild); a draft or a skill has none."""

    # No index of its own: the keyword index below leads with the tenant, and a plain one would
    # tempt the planner to read all of a tenant's chunks instead of only the matching ones.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    document = models.ForeignKey(KnowledgeDocument, on_delete=models.CASCADE, related_name="chunks")
    position = models.PositiveIntegerField()
    # The document's title and the section the chunk sits in ("Refunds > Exceptions"): weighted
    # above the text for keywords, and embedded with it, since a paragraph rarely names its topic.
    heading = models.TextField()
    text = models.TextField()
    content_hash = models.CharField(max_length=64, help_text="Of the text.")
    embedding = VectorField(dimensions=LOCAL_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    # Computed by PostgreSQL from the row itself, so every path that writes chunks (publish,
    # edit, rebuild, a bulk load) keeps the keyword index exact.
    search_vector = models.GeneratedField(
        expression=SearchVector("heading", weight="A", config="english")
        + SearchVector("text", weight="B", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["document", "position"], name="kbchunk_position")
        ]
        indexes = [
            # btree_gin puts the tenant in the same index: a keyword lookup reads one tenant's
            # postings.
            GinIndex(fields=["tenant", "search_vector"], name="kbchunk_search_vector"),
            HnswIndex(
                name="kbchunk_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return f"chunk {self.position} of document {self.document_id}"


class KnowledgeKey(models.Model):
    """The key that opens a document's title and body in the ledger; deleted with the document
    (crypto-shredding, as ``MemoryKey``)."""

    document_id = models.BigIntegerField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"key of knowledge document {self.document_id}"


# --- Content store (SPEC 7) ----------------------------------------------------------------------


class ContentItemType(models.TextChoices):
    ACTION_RESULT = "action_result", "Action result"
    WEB_CONTENT = "web_content", "Web content"
    DATABASE_RESULT = "database_result", "Database result"
    CUSTOM = "custom", "Custom"


class ContentScope(models.TextChoices):
    # Belongs to one run of its agent and goes when that run is cleared.
    RUN = "run", "Run"
    # Belongs to the agent across its runs.
    AGENT = "agent", "Agent"


class ContentFormat(models.TextChoices):
    TEXT = "text", "Text"
    JSON = "json", "JSON"


class ContentItem(models.Model):
    """One large result kept out of the conversation: the fourth channel (SPEC 7).

    Primary data, not a projection: the ledger records every store with the item's hash and size
    but never its content, so the audit log stays small and a content's integrity can be checked
    against it. Clearing blanks the body and keeps the row, so a run's token savings and the
    hashes stay visible after the content is gone.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    # The short id clients use; unique per tenant, never the primary key, so ids do not leak
    # how many items the service holds.
    key = models.CharField(max_length=16)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="content_items")
    scope = models.CharField(max_length=8, choices=ContentScope.choices)
    run_id = models.CharField(max_length=200, blank=True, default="")
    item_type = models.CharField(max_length=32, choices=ContentItemType.choices)
    format = models.CharField(max_length=8, choices=ContentFormat.choices)
    # Text as sent, or the JSON value serialised compactly (what the hash and size are of).
    body = models.TextField()
    content_hash = models.CharField(max_length=64, help_text="SHA-256 of the body's UTF-8.")
    size = models.PositiveBigIntegerField(help_text="Bytes of the body's UTF-8.")
    source = models.CharField(max_length=200, blank=True, default="")
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    related_to = ArrayField(models.CharField(max_length=16), default=list, blank=True)
    # Set by the action-result flow only: which action produced it and what the conversation got.
    action_type = models.CharField(max_length=200, blank=True, default="")
    rendering = models.CharField(max_length=16, blank=True, default="")
    compactor = models.CharField(max_length=100, blank=True, default="")
    tokens_full = models.PositiveIntegerField(default=0)
    tokens_returned = models.PositiveIntegerField(null=True, blank=True)
    timestamp = models.DateTimeField(help_text="When the content was produced; the store time.")
    created_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="contentitem_tenant_key")
        ]
        indexes = [
            models.Index(fields=["tenant", "agent", "run_id", "scope"], name="contentitem_scope"),
            models.Index(
                fields=["tenant", "agent", "run_id", "action_type"], name="contentitem_action"
            ),
            models.Index(fields=["tenant", "timestamp"], name="contentitem_time"),
            GinIndex(fields=["tags"], name="contentitem_tags"),
        ]

    def __str__(self) -> str:
        return f"content item {self.key}"


class ContentSnapshot(models.Model):
    """A read-only view of a fixed set of content items, handed to a sub-agent.

    It holds references only; reading through it reads the items themselves, so nothing is
    copied and a cleared item is gone from every snapshot too.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=32)
    owner = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    # The sub-agent it is for; empty means any agent of the tenant holding the id.
    grantee = models.ForeignKey(
        Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    label = models.CharField(max_length=200, blank=True, default="")
    items = models.ManyToManyField(ContentItem, related_name="snapshots")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="contentsnapshot_tenant_key")
        ]

    def __str__(self) -> str:
        return f"content snapshot {self.key}"


class ContentAttachment(models.Model):
    """An item re-attached to another agent's run by restoring a snapshot: a reference, so the
    restoring agent can query and read it there without a copy of the content."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    item = models.ForeignKey(ContentItem, on_delete=models.CASCADE, related_name="attachments")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    run_id = models.CharField(max_length=200, blank=True, default="")
    snapshot_key = models.CharField(max_length=32)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["item", "agent", "run_id"], name="contentattachment_once"
            )
        ]
        indexes = [
            models.Index(fields=["tenant", "agent", "run_id"], name="contentattachment_scope")
        ]

    def __str__(self) -> str:
        return f"item {self.item_id} attached to agent {self.agent_id} run {self.run_id!r}"
