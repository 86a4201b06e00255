"""Identity (tenants, agents, API keys, memberships) and the append-only event log."""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Func
from django.db.models.fields.json import KT

from ledger.names import AGENT_NAME_KEY_MAX_LENGTH, AGENT_NAME_MAX_LENGTH, agent_name_key


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

    name = models.CharField(
        max_length=AGENT_NAME_MAX_LENGTH,
        help_text="The orchestrator's name for it; unique per tenant, look-alikes included.",
    )
    # ledger.names.agent_name_key(name), kept by save(): names that differ only in case or in
    # look-alike characters share it, and the database holds it unique per tenant.
    name_key = models.CharField(max_length=AGENT_NAME_KEY_MAX_LENGTH, editable=False)
    model = models.CharField(max_length=200, blank=True, default="")
    primary_role = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    rounds_participated = models.PositiveIntegerField(default=0)
    probation_until = models.DateTimeField(null=True, blank=True)
    trust_score = models.FloatField(default=DEFAULT_TRUST_SCORE)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name_key"], name="agent_name_key_per_tenant")
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.name_key = agent_name_key(self.name)
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and "name" in update_fields:
            kwargs["update_fields"] = {*update_fields, "name_key"}
        super().save(*args, **kwargs)


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
        help_text="When set, the key acts as this agent and never reaches beyond it (its role "
        "is then agent or reviewer: admin keys are tenant-wide).",
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
        constraints = [
            # An admin key manages the tenant (agents, keys, rubric, settings), which no key
            # that acts as one agent may do: admin keys are always tenant-wide.
            models.CheckConstraint(
                condition=models.Q(agent__isnull=True) | ~models.Q(role=Role.ADMIN),
                name="api_key_admin_is_tenant_wide",
                violation_error_code="agent_scoped_admin_key",
                violation_error_message=(
                    "An admin key is always tenant-wide: leave the agent empty, or give a key "
                    "that acts as an agent the role agent or reviewer."
                ),
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def clean(self) -> None:
        # The constraint below says the same, but forms skip a constraint on a field they do not
        # edit (the admin shows ``agent`` read-only), so the rule is also checked here.
        if self.agent_id is not None and self.role == Role.ADMIN:
            raise ValidationError(
                {
                    "role": "An admin key is always tenant-wide; a key that acts as an agent is "
                    "agent or reviewer."
                },
                code="agent_scoped_admin_key",
            )


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
    # The distinct lowercase words of the displayable text, computed by PostgreSQL at insert
    # (migration 0005 defines the SQL functions): keyword relevance for recall without
    # tokenising thousands of events per query. Not part of the hash: it is derived.
    search_words = models.GeneratedField(
        expression=Func(
            Func(F("kind"), F("payload"), function="ledger_display_text"), function="ledger_words"
        ),
        output_field=ArrayField(models.TextField()),
        db_persist=True,
    )

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
            # Keyword lookups of memory search over the audit log (btree_gin, memory/0004),
            # written in place: see memory.episodic.models.Memory's indexes.
            GinIndex(
                fields=["tenant", "search_words"], name="event_search_words", fastupdate=False
            ),
            # The review pages read reviewers' confirmations by override id, a page of rows at a
            # time (trust.rounds.selectors.override_confirmations): only those events, keyed by
            # the id as text, so the lookup does not scan every confirmation of the tenant.
            models.Index(
                F("tenant"),
                KT("payload__override_id"),
                name="event_override_confirmed",
                condition=models.Q(kind="override.confirmed"),
            ),
        ]
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} by {self.actor}"

    @property
    def text(self) -> str:
        return displayable_text(self.payload, kind=self.kind)


DISPLAYABLE_PAYLOAD_KEYS = ("text", "summary", "goal")
WORKFLOW_STEP_KIND = "workflow.step_completed"
# A completed workflow step's result is its output (design note 001 searches ws.output). Only
# this kind shows `output`: elsewhere the key may hold a tool's raw answer, secrets included.
DISPLAYABLE_KEYS_BY_KIND = {WORKFLOW_STEP_KIND: ("text", "summary", "output", "goal")}
# Every key some kind may show: what a scan for events with displayable text looks for.
DISPLAYABLE_ANY_KIND_KEYS = ("text", "summary", "output", "goal")


def displayable_text(payload: Any, *, kind: str) -> str:
    """The one part of a payload that may be shown to agents or put into a prompt.

    Payloads can carry secrets under any other key, so nothing else of them is ever rendered.
    ``ledger_display_text(kind, payload)`` (migration 0013) is its twin in SQL.
    """
    if not isinstance(payload, dict):
        return ""
    for key in DISPLAYABLE_KEYS_BY_KIND.get(kind, DISPLAYABLE_PAYLOAD_KEYS):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


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


class IdempotencyRecord(TenantOwned):
    """The stored answer to a POST sent with an ``Idempotency-Key`` header.

    The row is inserted when the request starts and completed in the same transaction as the
    request's own writes, so a retry either finds the finished answer or (if the first attempt
    failed and rolled back) runs again. A concurrent duplicate waits on the unique index until the
    first commits, then replays its answer.
    """

    # The principal that sent the request: a replay is only ever for it (ledger.idempotency).
    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of method, path and body.")
    status_code = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["api_key", "key"], name="idempotency_key_per_api_key")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.status_code or 'in progress'})"


DEFAULT_GLOBALLY_VISIBLE_KINDS = [
    "world.observed",
    "judge.verdict",
    "user.injected",
    "run.started",
    "agent.reflected",
    "agent.spoke",
    "oracle.spoke",
]
# What counts toward an agent's reflection cadence: its own arc and the world's beats, not peer
# speech, so a chatty table does not make an agent reflect more often.
DEFAULT_REFLECTION_KINDS = [
    "world.observed",
    "judge.verdict",
    "user.injected",
    "run.started",
    "agent.reflected",
]
DEFAULT_KIND_IMPORTANCE = {
    "run.started": 0.3,
    "world.observed": 0.7,
    "agent.spoke": 0.5,
    "oracle.spoke": 0.5,
    "agent.thought": 0.4,
    "agent.reflected": 0.85,
    "judge.verdict": 0.9,
    "user.injected": 0.95,
    "hypothesis.proposed": 0.75,
    "clue.found": 0.8,
    "verdict.final": 1.0,
}


def _default_visible() -> list[str]:
    return list(DEFAULT_GLOBALLY_VISIBLE_KINDS)


def _default_reflection_kinds() -> list[str]:
    return list(DEFAULT_REFLECTION_KINDS)


def _default_importance() -> dict[str, float]:
    return dict(DEFAULT_KIND_IMPORTANCE)


class RecallSettings(models.Model):
    """A tenant's rules for what agents see of the ledger and how recall ranks it (SPEC 3.1).

    A tenant without a row uses the defaults below; admins change them in the admin or the API.
    """

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="recall_settings")
    globally_visible_kinds = models.JSONField(default=_default_visible)
    reflection_kinds = models.JSONField(default=_default_reflection_kinds)
    kind_importance = models.JSONField(default=_default_importance)
    default_importance = models.FloatField(default=0.5)
    weight_relevance = models.FloatField(default=0.3)
    weight_recency = models.FloatField(default=0.4)
    weight_importance = models.FloatField(default=0.3)
    recency_decay = models.FloatField(default=0.1, help_text="λ in exp(-λ·Δturn)")
    max_recent = models.PositiveIntegerField(default=8)
    top_k = models.PositiveIntegerField(default=8)
    reflection_threshold = models.PositiveIntegerField(default=10)

    class Meta:
        verbose_name_plural = "recall settings"

    def __str__(self) -> str:
        return f"recall settings of {self.tenant}"

    @classmethod
    def for_tenant(cls, tenant: Tenant) -> RecallSettings:
        """The tenant's settings, or the defaults (unsaved) when it has none. Read with the
        tenant when it was loaded with ``select_related("recall_settings")`` (the search's
        agent is: one statement fewer per search), else by one query, never from a cache an
        earlier call left on a long-lived tenant object."""
        if Tenant.recall_settings.is_cached(tenant):
            try:
                return tenant.recall_settings
            except cls.DoesNotExist:
                return cls(tenant=tenant)
        found = cls.objects.filter(tenant=tenant).first()
        return found if found is not None else cls(tenant=tenant)


class JobRun(models.Model):
    """One run of a background job (SPEC 9): when, how much it did, and how it ended.

    Jobs are global, not per tenant, so a run has no tenant; ``error`` stays free of tenant data
    (it is shown through the API to every tenant's admins) and ``details`` holds what only the
    operator sees in the Django admin (a traceback, the tenants whose chain broke).
    """

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        # Another run of the same job held its lock: this one did nothing.
        SKIPPED = "skipped"
        # Found still "running" by a later run that got the lock: its worker died mid-run.
        ABANDONED = "abandoned"

    job = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=Status.choices)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    rows_touched = models.BigIntegerField(default=0)
    duration_seconds = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    details = models.JSONField(default=dict, blank=True)
    # True when the run stopped at its time budget with work left and queued its continuation.
    requeued = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["job", "-started_at"], name="jobrun_job_started")]

    def __str__(self) -> str:
        return f"{self.job} {self.status} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class ChainVerification(TenantOwned):
    """The outcome of one on-demand walk of a tenant's chain: an admin's "Verify now" on the
    ledger page, or ``manage.py verify_ledger``. The ledger page's chain panel shows the latest
    beside what the nightly job found. Not an event: appending one would change the chain it
    describes, and a check changes nothing."""

    class Source(models.TextChoices):
        PAGE = "page", "Verify now"
        COMMAND = "command", "verify_ledger"

    checked_at = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    # "human:<username>" for the page, "system" for the command.
    checked_by = models.CharField(max_length=200)
    ok = models.BooleanField()
    events_checked = models.BigIntegerField()
    head_seq = models.BigIntegerField(default=0)
    broken_seq = models.BigIntegerField(null=True, blank=True)
    code = models.CharField(max_length=64, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    duration_seconds = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "-checked_at"], name="chainverification_latest")]

    def __str__(self) -> str:
        return f"{self.tenant} {'ok' if self.ok else 'BROKEN'} at {self.checked_at:%Y-%m-%d %H:%M}"
