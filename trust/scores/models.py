"""The history of each agent's trust score (the score itself is ``ledger.Agent.trust_score``).

A projection of the ledger's ``trust.score_changed`` events (trust.rounds.projection replays it);
written by trust.scores.services.trust_recompute.
"""

from __future__ import annotations

from django.db import models

from ledger.models import Agent, TenantOwned


class TrustScoreChange(TenantOwned):
    """One change of an agent's trust score, with why (``initial``, ``dissent_impact_true``...)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="trust_history")
    at = models.DateTimeField()
    score = models.FloatField()
    reason = models.CharField(max_length=64)
    components = models.JSONField(default=dict, blank=True)
    # What caused it, for the agent page's words and links: ``override_ids``, ``dissent_id``,
    # ``round_id``, ``by`` (the person or system), ``note``; {} for a slide or a recompute.
    cause = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "agent", "at"], name="trust_history_agent")]
        ordering = ["id"]
