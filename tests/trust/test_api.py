"""The trust core's REST endpoints: happy paths, bad input with stable codes, who may judge."""

from __future__ import annotations

import pytest

from ledger.models import Event, Role
from trust.governance.services import CriterionDraft, rubric_version_create
from trust.models import Dissent, Override, Round
from trust.rounds.overrides import override_log, override_revert
from trust.rounds.services import dissent_log

pytestmark = pytest.mark.django_db


@pytest.fixture
def creator(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


@pytest.fixture
def reviewer_agent(tenant, make_agent):
    return make_agent(tenant, name="Reviewer1")


@pytest.fixture
def admin(tenant, api_as):
    return api_as(tenant, role=Role.ADMIN)


@pytest.fixture
def orchestrator(tenant, api_as):
    """A tenant-wide key of the lowest role: what an orchestrator runs with."""
    return api_as(tenant, role=Role.AGENT)


def error(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def test_a_round_is_posted_finalised_and_revised(orchestrator, creator, reviewer_agent):
    posted = orchestrator.post(
        "/api/v1/rounds/",
        {"round_id": "run/round_1", "run_id": "run", "participants": ["Creator1", "Reviewer1"]},
        format="json",
    )
    round_pk = posted.json()["id"]

    finalised = orchestrator.post(
        f"/api/v1/rounds/{round_pk}/finalize/", {"final_output": "Use REST."}, format="json"
    )
    revised = orchestrator.post(
        f"/api/v1/rounds/{round_pk}/versions/",
        {"content": "Use REST v2.", "author": "bob"},
        format="json",
    )
    listed = orchestrator.get("/api/v1/rounds/", {"round_id": "run/round_1"}).json()["results"]
    shown = orchestrator.get(f"/api/v1/rounds/{round_pk}/").json()

    assert posted.status_code == 201
    assert sorted(posted.json()["participants"]) == ["Creator1", "Reviewer1"]
    assert finalised.status_code == 200
    assert finalised.json()["output_version"] == 1
    assert (revised.status_code, revised.json()["number"], revised.json()["author"]) == (
        201,
        2,
        "bob",
    )
    assert [r["id"] for r in listed] == [round_pk]
    assert shown["output"] == "Use REST v2."
    assert [v["number"] for v in shown["versions"]] == [1, 2]


def test_a_round_naming_an_unknown_agent_is_refused(orchestrator, creator):
    response = orchestrator.post(
        "/api/v1/rounds/", {"round_id": "r", "participants": ["Creator1", "Ghost"]}, format="json"
    )

    assert error(response) == (400, "unknown_agent")
    assert response.json()["error"]["details"] == {"unknown": ["Ghost"]}
    assert not Round.objects.exists()


def test_finalising_twice_with_different_outputs_is_refused(orchestrator, creator):
    round_pk = orchestrator.post("/api/v1/rounds/", {"round_id": "r"}, format="json").json()["id"]
    orchestrator.post(f"/api/v1/rounds/{round_pk}/finalize/", {"final_output": "A"}, format="json")
    events = Event.objects.count()

    same = orchestrator.post(
        f"/api/v1/rounds/{round_pk}/finalize/", {"final_output": " A "}, format="json"
    )
    other = orchestrator.post(
        f"/api/v1/rounds/{round_pk}/finalize/", {"final_output": "B"}, format="json"
    )

    assert same.status_code == 200
    assert error(other) == (409, "round_already_finalized")
    assert Event.objects.count() == events
    assert Round.objects.get().output == "A"


def test_an_agent_logs_its_own_dissent_with_its_own_key(tenant, creator, api_as, embedder_down):
    client = api_as(tenant, role=Role.AGENT, agent=creator)

    response = client.post(
        "/api/v1/dissents/",
        {"text": "This ignores the REST tooling.", "round_id": "r1", "context": {"task": "ADR"}},
        format="json",
    )

    assert response.status_code == 201
    body = response.json()
    assert (body["agent"], body["round_id"], body["novelty_known"]) == ("Creator1", "r1", False)
    assert body["depth_score"] == pytest.approx(5 / 50)


def test_a_dissent_citing_an_unknown_criterion_is_refused(tenant, creator, orchestrator):
    rubric_version_create(tenant=tenant, criteria=[CriterionDraft("Accuracy")], actor="a")

    response = orchestrator.post(
        "/api/v1/dissents/",
        {"agent": "Creator1", "text": "t", "rubric_citations": ["Vibes"]},
        format="json",
    )

    assert error(response) == (400, "unknown_rubric_criterion")
    assert response.json()["error"]["details"]["valid"] == ["Accuracy"]
    assert not Dissent.objects.exists()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"agent": "Creator1", "text": ""}, "empty_text"),
        ({"agent": "Ghost", "text": "t"}, "not_found"),
    ],
)
def test_a_bad_dissent_is_refused_with_its_code(creator, orchestrator, body, code):
    response = orchestrator.post("/api/v1/dissents/", body, format="json")

    assert response.json()["error"]["code"] == code
    assert response.status_code in (400, 404)
    assert not Dissent.objects.exists()


def test_impact_is_set_once(creator, orchestrator, embedder_down):
    dissent = dissent_log(agent=creator, text="t", actor="o")
    url = f"/api/v1/dissents/{dissent.pk}/impact/"

    first = orchestrator.post(url, {"impact": True, "feedback_incorporated": True}, format="json")
    again = orchestrator.post(url, {"impact": True}, format="json")
    other = orchestrator.post(url, {"impact": False}, format="json")

    assert (first.status_code, first.json()["impact"]) == (200, True)
    assert again.status_code == 200
    assert error(other) == (409, "impact_already_set")
    assert Event.objects.filter(kind="dissent.impact_set").count() == 1


def test_an_agent_key_may_not_judge(tenant, creator, api_as, embedder_down):
    client = api_as(tenant, role=Role.REVIEWER, agent=creator)  # the highest role it can hold
    dissent = dissent_log(agent=creator, text="t", actor="o")
    round_pk = Round.objects.create(tenant=tenant, round_id="r", created_at=dissent.created_at).pk

    impact = client.post(f"/api/v1/dissents/{dissent.pk}/impact/", {"impact": True}, format="json")
    override = client.post(
        "/api/v1/overrides/",
        {"agent": "Creator1", "agent_output": "a", "human_decision": "b"},
        format="json",
    )
    finalise = client.post(
        f"/api/v1/rounds/{round_pk}/finalize/", {"final_output": "x"}, format="json"
    )

    assert error(impact) == (403, "agent_scoped_key")
    assert error(override) == (403, "agent_scoped_key")
    assert error(finalise) == (403, "agent_scoped_key")
    assert Dissent.objects.get().impact is None
    assert not Override.objects.exists()


def test_an_override_is_logged_and_reverted_by_a_reviewer(tenant, creator, orchestrator, api_as):
    logged = orchestrator.post(
        "/api/v1/overrides/",
        {"agent": "Creator1", "agent_output": "a", "human_decision": "b", "decided_by": "alice"},
        format="json",
    )
    reviewer = api_as(tenant, role=Role.REVIEWER)
    url = f"/api/v1/overrides/{logged.json()['id']}/revert/"

    reverted = reviewer.post(url, {"reverted_by": "carol"}, format="json")
    twice = reviewer.post(url, {}, format="json")

    assert logged.status_code == 201
    assert logged.json()["decided_by"] == "alice"
    assert (reverted.status_code, reverted.json()["regret"], reverted.json()["reverted_by"]) == (
        200,
        True,
        "carol",
    )
    assert error(twice) == (409, "override_already_reverted")
    assert Override.objects.get().reverted_by == "carol"


def test_a_reviewer_reverts_with_a_note_and_withdraws_it(tenant, creator, orchestrator, api_as):
    logged = orchestrator.post(
        "/api/v1/overrides/",
        {"agent": "Creator1", "agent_output": "a", "human_decision": "b", "decided_by": "alice"},
        format="json",
    ).json()
    reviewer = api_as(tenant, role=Role.REVIEWER)
    url = f"/api/v1/overrides/{logged['id']}/revert/"

    too_long = reviewer.post(url, {"note": "x" * 2001}, format="json")
    early = reviewer.post(url + "withdraw/", {}, format="json")
    reverted = reviewer.post(url, {"note": "wrong customer"}, format="json")
    withdrawn = reviewer.post(url + "withdraw/", {"note": "misclick"}, format="json")
    twice = reviewer.post(url + "withdraw/", {}, format="json")

    assert error(too_long) == (400, "note_too_long")
    assert error(early) == (409, "override_not_reverted")
    assert (reverted.status_code, reverted.json()["revert_note"]) == (200, "wrong customer")
    assert withdrawn.status_code == 200
    assert {k: withdrawn.json()[k] for k in ("regret", "reverted_at", "revert_note")} == {
        "regret": False,
        "reverted_at": None,
        "revert_note": "",
    }
    assert error(twice) == (409, "override_not_reverted")
    assert Event.objects.filter(kind="override.revert_withdrawn").count() == 1


def test_an_agent_key_cannot_withdraw_a_revert(tenant, creator, api_as):
    override = override_log(
        agent=creator, agent_output="a", human_decision="b", decided_by="x", actor="o"
    )
    override_revert(override=override, reverted_by="x", actor="o")
    client = api_as(tenant, role=Role.REVIEWER, agent=creator)

    refused = client.post(f"/api/v1/overrides/{override.pk}/revert/withdraw/", {}, format="json")

    assert error(refused) == (403, "agent_scoped_key")
    assert Override.objects.get().regret


def test_an_agent_key_reads_only_its_own_evidence(
    tenant, creator, reviewer_agent, api_as, embedder_down
):
    mine = dissent_log(agent=creator, text="mine", actor="o")
    theirs = dissent_log(agent=reviewer_agent, text="theirs", actor="o")
    override_log(
        agent=reviewer_agent, agent_output="a", human_decision="b", decided_by="x", actor="o"
    )
    client = api_as(tenant, role=Role.AGENT, agent=creator)

    dissents = client.get("/api/v1/dissents/").json()["results"]
    overrides = client.get("/api/v1/overrides/").json()["results"]
    trust = client.get("/api/v1/trust/").json()["results"]
    foreign = client.get(f"/api/v1/dissents/{theirs.pk}/")
    other_trust = client.get(f"/api/v1/trust/{reviewer_agent.pk}/")

    assert [d["id"] for d in dissents] == [mine.pk]
    assert overrides == []
    assert [a["name"] for a in trust] == ["Creator1"]
    assert (foreign.status_code, other_trust.status_code) == (404, 404)


def test_the_trust_detail_shows_the_score_and_its_terms(
    tenant, creator, orchestrator, embedder_down
):
    dissent_log(agent=creator, text=" ".join(["w"] * 50), actor="o")
    override_log(agent=creator, agent_output="a", human_decision="b", decided_by="x", actor="o")

    body = orchestrator.get(f"/api/v1/trust/{creator.pk}/").json()

    # raw = 0.4*0.6 + 0.3*(1.0/2) + 0.3*1 = 0.69; (5*0.6 + 1*0.69) / 6
    assert body["trust_score"] == pytest.approx(0.615)
    assert body["components"]["regret_ratio"] == 0.0
    assert (body["dissents"], body["overrides"], body["on_probation"]) == (1, 1, True)
    assert [h["reason"] for h in body["history"]] == ["initial", "override_logged"]
    assert body["long_term_stats"]["total_overrides"] == 1
    assert len(body["recent_dissents"]) == len(body["recent_overrides"]) == 1


def test_an_agent_moves_between_tenants_through_the_api(
    tenant, other_tenant, creator, orchestrator, api_as, embedder_down
):
    dissent_log(agent=creator, text="a critique", actor="o")
    document = orchestrator.get(f"/api/v1/trust/{creator.pk}/export/").json()
    target = api_as(other_tenant, role=Role.ADMIN)

    imported = target.post("/api/v1/trust/import/", document, format="json")
    again = target.post("/api/v1/trust/import/", document, format="json")
    bad = target.post("/api/v1/trust/import/", {"agent_name": 7}, format="json")

    assert imported.status_code == 201
    assert imported.json()["dissents"] == 1
    assert error(again) == (409, "agent_has_trust_history")
    assert error(bad) == (400, "invalid_document")
    assert bad.json()["error"]["details"]["path"] == "agent_name"


def test_an_admin_recomputes_scores(creator, admin):
    response = admin.post("/api/v1/trust/recompute/", {}, format="json")
    unknown = admin.post("/api/v1/trust/recompute/", {"agents": ["Ghost"]}, format="json")

    assert response.json() == {"changed": 0}
    assert error(unknown) == (400, "unknown_agent")


def test_a_retried_dissent_with_the_same_idempotency_key_is_logged_once(
    creator, orchestrator, embedder_down
):
    body = {"agent": "Creator1", "text": "once"}

    first = orchestrator.post("/api/v1/dissents/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    second = orchestrator.post("/api/v1/dissents/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")

    assert first.json() == second.json()
    assert second["Idempotent-Replayed"] == "true"
    assert Dissent.objects.count() == 1
