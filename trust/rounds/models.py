"""The tables of rounds and the evidence logged in them: rounds, their participants and artifact
versions, dissents (with their vectors) and overrides.

Each is a projection of the ledger (trust.rounds.projection replays it) except DissentEmbedding,
derived data the embedder makes. Rows are written by trust.rounds.services and
trust.rounds.overrides in the same transaction as the event that records them.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models
from pgvector.django import HnswIndex, VectorField

from ledger.models import Agent, TenantOwned
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS


class Round(TenantOwned):
    """One round of a multi-agent run: who took part and what it finally produced.

    ``output`` is the newest version of the round's artifact: the final output, or a revision
    posted after it. Regret inference compares overrides with it (by ``output_hash``).
    """

    round_id = models.CharField(max_length=200, help_text="The orchestrator's id of the round.")
    run_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField()
    final_output = models.TextField(blank=True, default="")
    finalized_at = models.DateTimeField(null=True, blank=True)
    finalized_by = models.CharField(max_length=200, blank=True, default="")
    output = models.TextField(blank=True, default="")
    output_hash = models.CharField(max_length=64, blank=True, default="")
    output_version = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "round_id"], name="round_id_unique")
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return self.round_id

    @property
    def is_finalized(self) -> bool:
        return self.finalized_at is not None


class RoundParticipant(TenantOwned):
    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="participants")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    joined_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["round", "agent"], name="round_participant_unique")
        ]


class ArtifactVersion(TenantOwned):
    """A version of a round's artifact: 1 is the final output, later ones are revisions."""

    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    content = models.TextField()
    content_hash = models.CharField(max_length=64, help_text="Of the whitespace-normalised text.")
    author = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["round", "number"], name="artifact_version_unique")
        ]
        ordering = ["round_id", "number"]


class Dissent(TenantOwned):
    """A critique by an agent, with its depth (SPEC 8) fixed when it was logged."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="dissents")
    round_id = models.CharField(max_length=200, blank=True, default="")
    occurred_at = models.DateTimeField()
    created_at = models.DateTimeField()
    context = models.JSONField(default=dict, blank=True)
    text = models.TextField()
    rubric_citations = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    rubric_version = models.PositiveIntegerField(null=True, blank=True)
    length_score = models.FloatField(default=0.0)
    citation_score = models.FloatField(default=0.0)
    novelty = models.FloatField(default=0.0)
    novelty_known = models.BooleanField(default=True)
    depth_score = models.FloatField()
    impact = models.BooleanField(null=True, blank=True)
    feedback_incorporated = models.BooleanField(null=True, blank=True)
    impact_set_at = models.DateTimeField(null=True, blank=True)
    imported = models.BooleanField(default=False)

    class Meta:
        indexes = [
            # INCLUDE: the trust evidence (counts of impact, the last 100 depths) is read from
            # the index alone.
            models.Index(
                fields=["tenant", "agent", "-occurred_at", "-id"],
                name="dissent_agent_time",
                include=["impact", "depth_score"],
            ),
        ]
        ordering = ["id"]


class DissentEmbedding(TenantOwned):
    """The vector of a dissent's text, for novelty: derived data, like memory.EventEmbedding.

    A separate table keyed by dissent id, so rebuilding the dissents from the ledger keeps the
    vectors (the embedder is not part of the replay), and a dissent logged while the embedder
    was down gets its row from the backfill later.
    """

    dissent_id = models.BigIntegerField(unique=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    embedding = VectorField(dimensions=LOCAL_DIMENSIONS)
    model = models.CharField(max_length=200)

    class Meta:
        indexes = [
            HnswIndex(
                name="dissent_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]


# What a withdrawn revert leaves on an override: the state of one never reverted.
OPEN_OVERRIDE: dict[str, Any] = {
    "regret": False,
    "reverted_by": "",
    "reverted_at": None,
    "revert_reason": "",
    "revert_note": "",
}


class Override(TenantOwned):
    """A person (or a deciding agent) replacing an agent's output with their own decision."""

    class RevertReason(models.TextChoices):
        INFERRED = "inferred", "Final output differs after the deadline"
        MARKED = "marked", "Marked by a person"
        NEWER_VERSION = "newer_version", "A newer artifact version undid it"
        IMPORTED = "imported", "Imported as reverted"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="overrides")
    round_id = models.CharField(max_length=200, blank=True, default="")
    occurred_at = models.DateTimeField()
    created_at = models.DateTimeField()
    context = models.JSONField(default=dict, blank=True)
    agent_output = models.TextField()
    human_decision = models.TextField()
    agent_output_hash = models.CharField(max_length=64)
    decision_hash = models.CharField(max_length=64)
    decided_by = models.CharField(max_length=200, blank=True, default="")
    regret = models.BooleanField(default=False)
    auto_check_deadline = models.DateTimeField()
    # "" while not reverted (SPEC's null), then "system" or who reverted it.
    reverted_by = models.CharField(max_length=200, blank=True, default="")
    reverted_at = models.DateTimeField(null=True, blank=True)
    revert_reason = models.CharField(
        max_length=16, choices=RevertReason.choices, blank=True, default=""
    )
    # Why the person marked it: shown wherever the regret is; "" for inferred reverts.
    revert_note = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(
                fields=["tenant", "agent", "-occurred_at"],
                name="override_agent_time",
                include=["regret"],
            ),
            # Regret inference reads only the overrides still open.
            models.Index(
                fields=["tenant", "round_id", "auto_check_deadline"],
                name="override_open",
                condition=models.Q(reverted_at__isnull=True),
            ),
            models.Index(fields=["tenant", "decided_by"], name="override_decided_by"),
            # The review list's pages in HISTORY_ORDER (trust.rounds.selectors): newest first,
            # read in order up to the page instead of sorting every override of the tenant.
            models.Index(fields=["tenant", "-occurred_at", "-id"], name="override_history"),
            # Counting the open overrides of a status for the review list's pager reads only
            # this index: the deadline says waiting or past it, the id whether it is confirmed.
            models.Index(
                fields=["tenant", "auto_check_deadline"],
                name="override_open_ids",
                include=["id"],
                condition=models.Q(reverted_at__isnull=True),
            ),
        ]
        ordering = ["id"]

    @property
    def is_reverted(self) -> bool:
        return self.reverted_at is not None
