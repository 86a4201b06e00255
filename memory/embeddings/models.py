"""The semantic index's table: one vector per ledger event with displayable text."""

from __future__ import annotations

from django.db import models
from pgvector.django import VectorField

from ledger.models import Event, Tenant


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
