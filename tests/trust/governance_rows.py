"""Trust evidence written straight to the tables, for the governance tests: exact times and
outcomes without the core's services (or an embedder) in the way."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from ledger.models import Agent
from trust.models import Dissent, Override
from trust.scoring import text_hash


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
