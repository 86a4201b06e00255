"""Trust: rounds, dissents, overrides, trust score history, gaming flags and the living rubric.

Every table here is a projection of the ledger (trust.projection replays it). Rows are written by
trust.services in the same transaction as the event that records them.
"""

from __future__ import annotations

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
        ]
        ordering = ["id"]

    @property
    def is_reverted(self) -> bool:
        return self.reverted_at is not None


class TrustScoreChange(TenantOwned):
    """One change of an agent's trust score, with why (``initial``, ``dissent_impact_true``...)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="trust_history")
    at = models.DateTimeField()
    score = models.FloatField()
    reason = models.CharField(max_length=64)
    components = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "agent", "at"], name="trust_history_agent")]
        ordering = ["id"]


class GamingFlag(TenantOwned):
    """An agent whose rubric citations narrowed while its trust stayed high, for a person."""

    class Status(models.TextChoices):
        OPEN = "open", "Waiting for review"
        DISMISSED = "dismissed", "Dismissed"
        CONFIRMED = "confirmed", "Confirmed"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="gaming_flags")
    created_at = models.DateTimeField()
    entropy_bits = models.FloatField()
    trust_score = models.FloatField()
    dissents_considered = models.PositiveIntegerField()
    citation_counts = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    reviewed_by = models.CharField(max_length=200, blank=True, default="")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    review_note = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            # At most one flag per agent waits for a person at a time.
            models.UniqueConstraint(
                fields=["agent"],
                condition=models.Q(status="open"),
                name="gaming_flag_one_open",
            )
        ]
        ordering = ["id"]


class RubricVersion(TenantOwned):
    """A numbered version of the tenant's rubric; the highest number is the current one."""

    number = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=200)
    note = models.TextField(blank=True, default="")
    proposal = models.ForeignKey(
        "RubricProposal", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "number"], name="rubric_version_unique")
        ]
        ordering = ["number"]

    def __str__(self) -> str:
        return f"rubric v{self.number}"


class RubricCriterion(TenantOwned):
    version = models.ForeignKey(RubricVersion, on_delete=models.CASCADE, related_name="criteria")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "name"], name="rubric_criterion_unique")
        ]
        ordering = ["id"]


class RubricProposal(TenantOwned):
    """A rubric change opened by a high-trust decision maker's override, for an admin to decide."""

    class Action(models.TextChoices):
        ADD = "add", "Add a criterion"
        CHANGE = "change", "Change a criterion's description"
        REMOVE = "remove", "Remove a criterion"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        ACCEPTED = "accepted", "Accepted"
        REJECTED = "rejected", "Rejected"

    override = models.ForeignKey(
        Override, on_delete=models.SET_NULL, null=True, blank=True, related_name="proposals"
    )
    proposed_by = models.CharField(max_length=200)
    proposer_trust = models.FloatField()
    created_at = models.DateTimeField()
    action = models.CharField(max_length=16, choices=Action.choices)
    criterion = models.CharField(max_length=100)
    description = models.TextField(blank=True, default="")
    rationale = models.TextField(blank=True, default="")
    base_version = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    decided_by = models.CharField(max_length=200, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, default="")
    result_version = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
