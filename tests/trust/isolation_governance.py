"""Trust endpoints in the isolation matrix (tests/ledger/test_isolation.py): the entries, the
objects of the victim tenant they target, and the rows that must not change."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils import timezone

from ledger.models import Agent, Role, Tenant
from tests.endpoints import Endpoint
from trust.governance.services import (
    CriterionDraft,
    gaming_check,
    rubric_proposal_open,
    rubric_version_create,
)
from trust.models import Dissent, GamingFlag, Override, RubricProposal, RubricVersion
from trust.scores.scoring import text_hash


@dataclass(frozen=True)
class NumberedEndpoint(Endpoint):
    """An entry whose path names its object by a number other than the id ("{number}")."""

    def url(self, ids: dict[str, int]) -> str:
        assert self.target is not None
        return self.path.replace("{number}", str(ids[self.target]))


REVIEW = {"status": "dismissed", "note": "looked fine"}
PROPOSAL = {"override": 1, "action": "add", "criterion": "Brevity", "rationale": "r"}

GOVERNANCE_ENDPOINTS: list[Endpoint] = [
    Endpoint("post", "/api/v1/trust/devils-advocate/", Role.AGENT, {"candidates": ["Creator1"]}),
    Endpoint("get", "/api/v1/trust/metrics/", Role.REVIEWER),
    Endpoint("get", "/api/v1/flags/", Role.REVIEWER),
    Endpoint("get", "/api/v1/flags/{id}/", Role.REVIEWER, target="flag"),
    Endpoint("post", "/api/v1/flags/{id}/review/", Role.REVIEWER, REVIEW, target="flag"),
    Endpoint("get", "/api/v1/rubric/", Role.AGENT),
    Endpoint("post", "/api/v1/rubric/", Role.ADMIN, {"criteria": [{"name": "Accuracy"}]}),
    Endpoint("get", "/api/v1/rubric/versions/", Role.AGENT),
    NumberedEndpoint(
        "get", "/api/v1/rubric/versions/{number}/", Role.AGENT, target="rubric_version"
    ),
    Endpoint("get", "/api/v1/rubric-proposals/", Role.AGENT),
    Endpoint("post", "/api/v1/rubric-proposals/", Role.AGENT, PROPOSAL),
    Endpoint("get", "/api/v1/rubric-proposals/{id}/", Role.AGENT, target="proposal"),
    Endpoint("post", "/api/v1/rubric-proposals/{id}/accept/", Role.ADMIN, target="proposal"),
    Endpoint("post", "/api/v1/rubric-proposals/{id}/reject/", Role.ADMIN, target="proposal"),
]


def governance_victims(*, tenant: Tenant, agent: Agent) -> dict[str, int]:
    """Ids of the victim's trust objects, by the ``target`` names the entries use."""
    now = timezone.now()
    # Several versions, so the victim's number is not one the intruder could have of its own.
    for names in (["Accuracy"], ["Accuracy", "Completeness"]):
        version = rubric_version_create(
            tenant=tenant, criteria=[CriterionDraft(name) for name in names], actor="x"
        )
    Agent.objects.filter(pk=agent.pk).update(trust_score=0.9)
    Dissent.objects.bulk_create(
        Dissent(
            tenant=tenant,
            agent=agent,
            occurred_at=now - timedelta(minutes=i),
            created_at=now,
            text="Not accurate.",
            rubric_citations=["Accuracy"],
            depth_score=0.5,
        )
        for i in range(10)
    )
    flag = gaming_check(agent=agent, now=now)
    assert flag is not None
    override = Override.objects.create(
        tenant=tenant,
        agent=agent,
        occurred_at=now,
        created_at=now,
        agent_output="draft",
        human_decision="final",
        agent_output_hash=text_hash("draft"),
        decision_hash=text_hash("final"),
        decided_by=agent.name,
        auto_check_deadline=now + timedelta(hours=24),
    )
    proposal = rubric_proposal_open(
        override=override,
        action="add",
        criterion="Brevity",
        description="Say it short.",
        rationale="Long answers hid the point.",
        actor="x",
    )
    return {"flag": flag.pk, "rubric_version": version.number, "proposal": proposal.pk}


def governance_snapshot() -> list[Any]:
    return [
        *GamingFlag.objects.order_by("id").values_list("id", "status", "review_note"),
        *RubricVersion.objects.order_by("id").values_list("id", "number"),
        *RubricProposal.objects.order_by("id").values_list("id", "status", "result_version"),
    ]
