"""The content store's tables (SPEC 7): items, snapshots and what a snapshot holds."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models

from ledger.models import Agent, Tenant


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
            # Written in place: see memory.episodic.models.Memory's indexes.
            GinIndex(fields=["tags"], name="contentitem_tags", fastupdate=False),
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


class ContentSavingsDay(models.Model):
    """The action results of one run by one agent on one day (UTC), summed: what the token
    savings page reads instead of every result (100,000 results a month are a few thousand of
    these). Derived from ``ContentItem``: ``action_result_record`` adds each result here in its
    transaction, and the ``content_savings`` projection rebuilds the tenant's rows from the
    items. The counted columns of an item never change after it is stored, and an item goes
    only with its agent or tenant, whose deletion cascades here too."""

    # Indexed first in both indexes below.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    day = models.DateField()
    run_id = models.CharField(max_length=200, blank=True, default="")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    results = models.PositiveIntegerField()
    full_renderings = models.PositiveIntegerField()
    tokens_full = models.PositiveBigIntegerField()
    tokens_returned = models.PositiveBigIntegerField()
    last_result_at = models.DateTimeField()

    class Meta:
        constraints = [
            # Also the index of the agents of the runs the page lists.
            models.UniqueConstraint(
                fields=["tenant", "run_id", "agent", "day"], name="contentsavingsday_key"
            )
        ]
        # The page's read: the tenant's days since a date.
        indexes = [models.Index(fields=["tenant", "day"], name="contentsavingsday_day")]

    def __str__(self) -> str:
        return f"savings of run {self.run_id!r} by agent {self.agent_id} on {self.day}"
