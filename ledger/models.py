"""Identity (tenants, agents, API keys, memberships) and the append-only event log."""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.db import models


class Tenant(models.Model):
    """An organisation. Every other row in the service belongs to exactly one tenant."""

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class TenantQuerySet(models.QuerySet[Any]):
    def for_tenant(self, tenant: Tenant) -> TenantQuerySet:
        return self.filter(tenant=tenant)


class TenantOwned(models.Model):
    """Base for every tenant-owned table: the tenant column and the scoped query helper."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        abstract = True


class Agent(TenantOwned):
    DEFAULT_TRUST_SCORE = 0.6

    name = models.CharField(max_length=200, help_text="Unique per tenant; the orchestrator's name.")
    model = models.CharField(max_length=200, blank=True, default="")
    primary_role = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    rounds_participated = models.PositiveIntegerField(default=0)
    probation_until = models.DateTimeField(null=True, blank=True)
    trust_score = models.FloatField(default=DEFAULT_TRUST_SCORE)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="agent_name_unique_per_tenant")
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    """Roles of API keys and of people. Each role may do everything the roles before it may."""

    AGENT = "agent", "Agent"
    REVIEWER = "reviewer", "Reviewer"
    ADMIN = "admin", "Admin"

    @classmethod
    def rank(cls, role: str) -> int:
        return [cls.AGENT, cls.REVIEWER, cls.ADMIN].index(cls(role))

    @classmethod
    def allows(cls, held: str, required: str) -> bool:
        return cls.rank(held) >= cls.rank(required)


class ApiKey(TenantOwned):
    """A bearer key. Only its SHA-256 is stored; the key itself is shown once at creation.

    Keys carry 256 bits of randomness, so a fast hash is enough: there is nothing to brute-force
    that a slow password hash would protect.
    """

    name = models.CharField(max_length=200, help_text="What the key is for, for people.")
    prefix = models.CharField(max_length=16, db_index=True, help_text="Visible start of the key.")
    key_hash = models.CharField(max_length=64, unique=True)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.AGENT)
    agent = models.ForeignKey(
        Agent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_keys",
        help_text="When set, the key acts as this agent and reads only its memories.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Membership(TenantOwned):
    """A person's seat in a tenant, with what they may do there."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(
        max_length=16,
        choices=[(Role.REVIEWER.value, "Reviewer"), (Role.ADMIN.value, "Admin")],
        default=Role.REVIEWER,
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"


class Event(models.Model):
    """One entry of a tenant's append-only, hash-chained log.

    The database refuses UPDATE, DELETE and TRUNCATE on this table (a trigger installed by a
    migration); corrections are new events. ``hash`` covers every field below and ``prev_hash``,
    see ``ledger.chain``.
    """

    GENESIS_HASH = "0" * 64

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    seq = models.BigIntegerField()
    run_id = models.CharField(max_length=200, blank=True, default="")
    round_id = models.CharField(max_length=300, blank=True, default="")
    turn = models.IntegerField(default=0)
    actor = models.CharField(max_length=200)
    kind = models.CharField(max_length=100)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects: ClassVar[TenantQuerySet] = TenantQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "seq"], name="event_seq_unique_per_tenant")
        ]
        indexes = [
            models.Index(fields=["tenant", "run_id", "seq"], name="event_run_seq"),
            models.Index(fields=["tenant", "kind", "seq"], name="event_kind_seq"),
            models.Index(fields=["tenant", "actor", "seq"], name="event_actor_seq"),
            models.Index(fields=["tenant", "round_id", "seq"], name="event_round_seq"),
        ]
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} by {self.actor}"


__all__ = [
    "Agent",
    "ApiKey",
    "Event",
    "Membership",
    "Role",
    "Tenant",
    "TenantOwned",
    "TenantQuerySet",
]
