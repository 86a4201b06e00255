"""Export: one agent's trust memory as the design note's per-agent document
(``memory/<Agent>.json``); trust.interchange.services imports it. The module docstring there
describes the document."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from ledger.models import Agent
from trust.rounds.models import Dissent, Override
from trust.scores import selectors


def timestamp_text(moment: datetime | None) -> str | None:
    """A moment as the documents write it: ISO 8601 in UTC with a Z, or None."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def agent_export(*, agent: Agent, now: datetime | None = None) -> dict[str, Any]:
    moment = now or timezone.now()
    dissents = Dissent.objects.filter(agent=agent).order_by("occurred_at", "id")
    overrides = Override.objects.filter(agent=agent).order_by("occurred_at", "id")
    return {
        "agent_name": agent.name,
        "model": agent.model,
        "primary_role": agent.primary_role,
        "dissent_history": [
            {
                "round_id": d.round_id,
                "timestamp": timestamp_text(d.occurred_at),
                "context": d.context,
                "dissent_text": d.text,
                "rubric_citations": list(d.rubric_citations),
                "impact": d.impact,
                "impact_set_at": timestamp_text(d.impact_set_at),
                "depth_score": d.depth_score,
                "novelty": d.novelty,
                "novelty_known": d.novelty_known,
                "feedback_incorporated": d.feedback_incorporated,
            }
            for d in dissents
        ],
        "override_history": [
            {
                "round_id": o.round_id,
                "timestamp": timestamp_text(o.occurred_at),
                "context": o.context,
                "agent_output": o.agent_output,
                "human_decision": o.human_decision,
                "decided_by": o.decided_by,
                "regret": o.regret,
                "auto_check_deadline": timestamp_text(o.auto_check_deadline),
                "reverted_by": o.reverted_by or None,
                "reverted_at": timestamp_text(o.reverted_at),
                "revert_reason": o.revert_reason or None,
                "revert_note": o.revert_note or None,
            }
            for o in overrides
        ],
        "trust_score": agent.trust_score,
        "trust_score_history": [
            {
                "timestamp": timestamp_text(h["timestamp"]),
                "score": h["score"],
                "reason": h["reason"],
                "components": h["components"],
            }
            for h in selectors.trust_history(agent=agent)
        ],
        "long_term_stats": asdict(selectors.long_term_stats(agent=agent, now=moment)),
        "rounds_participated": agent.rounds_participated,
        "probation_until": timestamp_text(agent.probation_until),
    }
