"""Trust evidence written straight to the tables, for the governance tests: exact times and
outcomes without the core's services (or an embedder) in the way."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ledger.models import Agent
from trust.models import Dissent, Override
from trust.scores.scoring import text_hash


def agent_with(agent: Agent, *, trust: float, rounds: int = 10) -> Agent:
    Agent.objects.filter(pk=agent.pk).update(trust_score=trust, rounds_participated=rounds)
    agent.refresh_from_db()
    return agent


def dissent_row(
    agent: Agent,
    at: datetime,
    *,
    citations: Sequence[str] = (),
    impact: bool | None = None,
) -> Dissent:
    return Dissent.objects.create(
        tenant=agent.tenant,
        agent=agent,
        occurred_at=at,
        created_at=at,
        text="This misses a case.",
        rubric_citations=list(citations),
        depth_score=0.5,
        impact=impact,
    )


def override_row(
    agent: Agent,
    at: datetime,
    *,
    decided_by: str = "human:alice",
    regret: bool = False,
    changed: bool = True,
) -> Override:
    decision = "the person's text" if changed else "the agent's text"
    return Override.objects.create(
        tenant=agent.tenant,
        agent=agent,
        occurred_at=at,
        created_at=at,
        agent_output="the agent's text",
        human_decision=decision,
        agent_output_hash=text_hash("the agent's text"),
        decision_hash=text_hash(decision),
        decided_by=decided_by,
        regret=regret,
        auto_check_deadline=at + timedelta(hours=24),
    )


def flag_row(agent: Agent, *, counts: dict[str, int] | None = None, trust: float = 0.85) -> Any:
    """An open gaming flag of the agent, as gaming_check would raise it."""
    from django.utils import timezone

    from trust.models import GamingFlag

    cited = counts or {"Accuracy": 18, "Evidence": 2}
    return GamingFlag.objects.create(
        tenant=agent.tenant,
        agent=agent,
        created_at=timezone.now(),
        entropy_bits=0.32,
        trust_score=trust,
        dissents_considered=sum(cited.values()),
        citation_counts=cited,
    )


def proposal_row(
    tenant: Any, *, override: Override | None = None, rationale: str = "Figures were paraphrased."
) -> Any:
    """A pending proposal to add the criterion 'Sourcing' to rubric version 1."""
    from django.utils import timezone

    from trust.models import RubricProposal

    return RubricProposal.objects.create(
        tenant=tenant,
        override=override,
        proposed_by="sam",
        proposer_trust=0.9,
        created_at=timezone.now(),
        action="add",
        criterion="Sourcing",
        description="Figures are quoted exactly, with the page.",
        rationale=rationale,
        base_version=1,
    )
