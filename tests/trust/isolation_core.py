"""Trust endpoints in the isolation matrix (tests/ledger/test_isolation.py): the entries, the
objects of the victim tenant they target, and the rows that must not change."""

from __future__ import annotations

from typing import Any

from ledger.models import Agent, Role, Tenant
from tests.endpoints import Endpoint
from trust.models import Dissent, Override, Round, TrustScoreChange
from trust.rounds.overrides import override_log
from trust.rounds.services import dissent_log, rounds_post

OVERRIDE = {"agent": "Creator1", "agent_output": "draft", "human_decision": "decision"}

TRUST_CORE_ENDPOINTS: list[Endpoint] = [
    Endpoint("get", "/api/v1/rounds/", Role.AGENT),
    Endpoint("post", "/api/v1/rounds/", Role.AGENT, {"round_id": "r9", "participants": []}),
    Endpoint("get", "/api/v1/rounds/{id}/", Role.AGENT, target="round"),
    Endpoint(
        "post", "/api/v1/rounds/{id}/finalize/", Role.AGENT, {"final_output": "x"}, target="round"
    ),
    Endpoint("post", "/api/v1/rounds/{id}/versions/", Role.AGENT, {"content": "y"}, target="round"),
    Endpoint("get", "/api/v1/dissents/", Role.AGENT),
    Endpoint("post", "/api/v1/dissents/", Role.AGENT, {"agent": "Creator1", "text": "I object"}),
    Endpoint("get", "/api/v1/dissents/{id}/", Role.AGENT, target="dissent"),
    Endpoint(
        "post", "/api/v1/dissents/{id}/impact/", Role.AGENT, {"impact": True}, target="dissent"
    ),
    Endpoint("get", "/api/v1/overrides/", Role.AGENT),
    Endpoint("post", "/api/v1/overrides/", Role.AGENT, OVERRIDE),
    Endpoint("get", "/api/v1/overrides/{id}/", Role.AGENT, target="override"),
    Endpoint("post", "/api/v1/overrides/{id}/revert/", Role.REVIEWER, {}, target="override"),
    Endpoint(
        "post", "/api/v1/overrides/{id}/revert/withdraw/", Role.REVIEWER, {}, target="override"
    ),
    Endpoint("get", "/api/v1/trust/", Role.AGENT),
    Endpoint("get", "/api/v1/trust/{id}/", Role.AGENT, target="agent"),
    Endpoint("get", "/api/v1/trust/{id}/export/", Role.AGENT, target="agent"),
    Endpoint("post", "/api/v1/trust/import/", Role.ADMIN, {"agent_name": "Imported1"}),
    Endpoint("get", "/api/v1/export/", Role.ADMIN),
    Endpoint("post", "/api/v1/trust/recompute/", Role.ADMIN, {}),
]


def trust_core_victims(*, tenant: Tenant, agent: Agent) -> dict[str, int]:
    """Ids of the victim's trust objects, by the ``target`` names the entries use."""
    round_ = rounds_post(
        tenant=tenant, round_id="victim-round", participants=[agent.name], actor="x"
    )
    dissent = dissent_log(
        agent=agent, text="a private critique", round_id="victim-round", actor="x"
    )
    override = override_log(
        agent=agent,
        agent_output="draft",
        human_decision="decision",
        decided_by="alice",
        round_id="victim-round",
        actor="x",
    )
    return {"round": round_.pk, "dissent": dissent.pk, "override": override.pk}


def trust_core_snapshot() -> list[Any]:
    return [
        *Round.objects.order_by("id").values_list("id", "output", "output_version"),
        *Dissent.objects.order_by("id").values_list("id", "impact"),
        *Override.objects.order_by("id").values_list("id", "regret", "reverted_by"),
        *Agent.objects.order_by("id").values_list("id", "trust_score", "rounds_participated"),
        TrustScoreChange.objects.count(),
    ]
