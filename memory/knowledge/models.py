"""The knowledge base's tables (SPEC 6): documents, their search chunks, and their keys."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from pgvector.django import HnswIndex, VectorField

from ledger.models import Tenant
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS


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
            # Written in place: see memory.episodic.models.Memory's indexes.
            GinIndex(
                fields=["tenant", "search_vector"], name="kbchunk_search_vector", fastupdate=False
            ),
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
