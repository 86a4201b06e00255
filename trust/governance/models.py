"""The governance tables: gaming flags, the living rubric's versions and criteria, and rubric
proposals.

A projection of the ledger (trust.governance.projection replays it); written by
trust.governance.services in the same transaction as the event that records them.
"""

from __future__ import annotations

from django.db import models

from ledger.models import Agent, TenantOwned
from trust.rounds.models import Override


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
