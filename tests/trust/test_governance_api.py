from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledger.models import Event, Role
from tests.trust.governance_rows import agent_with, dissent_row, override_row
from trust.governance.services import CriterionDraft, gaming_check, rubric_version_create
from trust.models import GamingFlag, RubricProposal

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def error_code(response) -> str:
    return response.json()["error"]["code"]


@pytest.fixture
def team(tenant, make_agent):
    return {
        name: agent_with(make_agent(tenant, name=name), trust=trust)
        for name, trust in [("A", 0.9), ("B", 0.5), ("Low", 0.1)]
    }


# --- Devil's Advocate ------------------------------------------------------------------------


def test_a_tenant_wide_agent_key_picks_the_devils_advocate(tenant, team, api_as):
    client = api_as(tenant, role=Role.AGENT)

    response = client.post(
        "/api/v1/trust/devils-advocate/",
        {"candidates": ["A", "B", "Low"], "seed": 42},
        format="json",
    )

    assert response.status_code == 200
    body = response.json()
    assert body["picked"] in {"A", "B"}
    assert {k: body[k] for k in ("eligible", "weights", "seed", "fallback")} == {
        "eligible": ["A", "B"],
        "weights": [0.9, 0.5],
        "seed": 42,
        "fallback": False,
    }
    event = Event.objects.get(tenant=tenant, seq=body["event_seq"])
    assert event.kind == "trust.devils_advocate_picked"


def test_an_agent_scoped_key_cannot_pick_the_devils_advocate(tenant, team, api_as):
    # The answer carries every candidate's trust, which one agent may not read of another.
    client = api_as(tenant, role=Role.REVIEWER, agent=team["B"])

    response = client.post(
        "/api/v1/trust/devils-advocate/", {"candidates": ["A", "B"], "seed": 1}, format="json"
    )

    assert (response.status_code, error_code(response)) == (403, "agent_scoped_key")
    assert not Event.objects.filter(tenant=tenant, kind="trust.devils_advocate_picked").exists()


def test_a_pick_without_a_seed_reports_the_one_drawn(tenant, team, api_as):
    client = api_as(tenant, role=Role.AGENT)
    first = client.post("/api/v1/trust/devils-advocate/", {"candidates": ["A", "B"]}, format="json")

    again = client.post(
        "/api/v1/trust/devils-advocate/",
        {"candidates": ["A", "B"], "seed": first.json()["seed"]},
        format="json",
    )

    assert again.json()["picked"] == first.json()["picked"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"candidates": []}, "no_candidates"),
        ({"candidates": ["A", "A"]}, "duplicate_candidate"),
        ({"candidates": ["A", "Nobody"]}, "unknown_agent"),
        ({"candidates": ["A"], "seed": -1}, "invalid_seed"),
        ({"candidates": ["A"], "seed": True}, "invalid_seed"),
        ({"candidates": ["A"], "seed": 1.5}, "invalid_seed"),
        ({"candidates": ["A"], "seed": "7"}, "invalid_seed"),
        ({"candidates": ["A"], "seed": 2**63}, "invalid_seed"),
        ({"seed": 1}, "validation_error"),
    ],
)
def test_a_bad_pick_request_is_refused(tenant, team, api_as, body, code):
    response = api_as(tenant, role=Role.AGENT).post(
        "/api/v1/trust/devils-advocate/", body, format="json"
    )

    assert (response.status_code, error_code(response)) == (400, code)


def test_devils_advocate_is_not_an_agent_detail_route(tenant, team, api_as):
    response = api_as(tenant, role=Role.AGENT).get("/api/v1/trust/devils-advocate/")

    assert (response.status_code, error_code(response)) == (405, "method_not_allowed")


# --- Metrics ---------------------------------------------------------------------------------


@pytest.fixture
def evidence(team):
    dissent_row(team["A"], NOW, impact=True)
    dissent_row(team["B"], NOW, impact=False)
    override_row(team["A"], NOW, regret=True)


def test_a_reviewer_reads_the_metrics(tenant, evidence, api_as):
    response = api_as(tenant, role=Role.REVIEWER).get(
        "/api/v1/trust/metrics/",
        {"since": "2025-03-01T00:00:00Z", "until": "2025-03-03T00:00:00Z", "bucket": "day"},
    )

    assert response.status_code == 200
    body = response.json()
    assert [b["start"] for b in body["buckets"]] == ["2025-03-01T00:00:00Z", "2025-03-02T00:00:00Z"]
    assert body["buckets"][0]["counts"]["dissent_impact_rate"] == 0.5
    assert body["buckets"][1]["counts"]["dissent_impact_rate"] is None
    assert body["totals"]["regret_rate"] == 1.0
    assert body["agent"] is None


def test_metrics_of_one_agent_by_name(tenant, evidence, api_as):
    response = api_as(tenant, role=Role.REVIEWER).get(
        "/api/v1/trust/metrics/",
        {"agent": "B", "since": "2025-03-01T00:00:00Z", "until": "2025-03-02T00:00:00Z"},
    )

    assert response.json()["agent"] == "B"
    assert response.json()["totals"]["dissents"] == 1
    assert response.json()["totals"]["overrides"] == 0


def test_an_agent_scoped_key_sees_only_its_own_metrics(tenant, team, evidence, api_as):
    client = api_as(tenant, role=Role.REVIEWER, agent=team["B"])
    window = {"since": "2025-03-01T00:00:00Z", "until": "2025-03-02T00:00:00Z"}

    own = client.get("/api/v1/trust/metrics/", window)
    other = client.get("/api/v1/trust/metrics/", {**window, "agent": "A"})

    assert (own.json()["agent"], own.json()["totals"]["dissents"]) == ("B", 1)
    assert (other.status_code, error_code(other)) == (400, "unknown_agent")


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"bucket": "year"}, "validation_error"),
        ({"since": "yesterday"}, "validation_error"),
        ({"since": "2025-03-02T00:00:00Z", "until": "2025-03-01T00:00:00Z"}, "invalid_range"),
        ({"agent": "Nobody"}, "unknown_agent"),
    ],
)
def test_bad_metric_parameters_are_refused(tenant, team, api_as, params, code):
    response = api_as(tenant, role=Role.REVIEWER).get("/api/v1/trust/metrics/", params)

    assert (response.status_code, error_code(response)) == (400, code)


# --- Gaming flags ----------------------------------------------------------------------------


@pytest.fixture
def flag(team):
    for i in range(10):
        dissent_row(team["A"], NOW - timedelta(minutes=i), citations=["Accuracy"])
    return gaming_check(agent=team["A"], now=NOW)


def test_a_reviewer_lists_flags_by_status(tenant, flag, api_as):
    client = api_as(tenant, role=Role.REVIEWER)

    open_flags = client.get("/api/v1/flags/", {"status": "open"}).json()["results"]
    dismissed = client.get("/api/v1/flags/", {"status": "dismissed"}).json()["results"]
    bad = client.get("/api/v1/flags/", {"status": "maybe"})

    assert [(f["id"], f["agent"], f["citation_counts"]) for f in open_flags] == [
        (flag.pk, "A", {"Accuracy": 10})
    ]
    assert dismissed == []
    assert (bad.status_code, error_code(bad)) == (400, "invalid_filter")


def test_a_reviewer_reviews_a_flag_once(tenant, flag, api_as):
    client = api_as(tenant, role=Role.REVIEWER)
    url = f"/api/v1/flags/{flag.pk}/review/"

    first = client.post(url, {"status": "confirmed", "note": "Gamed."}, format="json")
    second = client.post(url, {"status": "dismissed"}, format="json")

    assert first.status_code == 200
    assert first.json()["status"] == "confirmed"
    assert client.get(f"/api/v1/flags/{flag.pk}/").json()["review_note"] == "Gamed."
    assert (second.status_code, error_code(second)) == (409, "flag_already_reviewed")


def test_a_review_needs_a_verdict(tenant, flag, api_as):
    response = api_as(tenant, role=Role.REVIEWER).post(
        f"/api/v1/flags/{flag.pk}/review/", {"status": "open"}, format="json"
    )

    assert (response.status_code, error_code(response)) == (400, "validation_error")
    assert GamingFlag.objects.get(pk=flag.pk).status == "open"


# --- Rubric ----------------------------------------------------------------------------------


def test_there_is_no_rubric_until_an_admin_posts_one(tenant, api_as):
    agent_client, admin = api_as(tenant, role=Role.AGENT), api_as(tenant, role=Role.ADMIN)

    missing = agent_client.get("/api/v1/rubric/")
    created = admin.post(
        "/api/v1/rubric/",
        {"criteria": [{"name": "Accuracy", "description": "Right."}], "note": "v1"},
        format="json",
    )
    current = agent_client.get("/api/v1/rubric/")

    assert (missing.status_code, error_code(missing)) == (404, "no_rubric")
    assert created.status_code == 201
    assert current.json() == created.json()
    assert current.json()["version"] == 1
    assert current.json()["criteria"] == [{"name": "Accuracy", "description": "Right."}]


@pytest.mark.parametrize(
    "criteria",
    [[], [{"name": "A"}, {"name": "a"}], [{"name": " "}]],
)
def test_a_bad_rubric_is_refused(tenant, api_as, criteria):
    response = api_as(tenant).post("/api/v1/rubric/", {"criteria": criteria}, format="json")

    assert response.status_code == 400
    assert error_code(response) in {"invalid_rubric", "validation_error"}


def test_rubric_versions_are_listed_and_read_by_number(tenant, api_as):
    for names in (["Accuracy"], ["Accuracy", "Clarity"]):
        rubric_version_create(tenant=tenant, criteria=[CriterionDraft(n) for n in names], actor="x")
    client = api_as(tenant, role=Role.AGENT)

    listed = client.get("/api/v1/rubric/versions/").json()
    first = client.get("/api/v1/rubric/versions/1/").json()
    missing = client.get("/api/v1/rubric/versions/3/")

    assert [v["version"] for v in listed] == [1, 2]
    assert [c["name"] for c in first["criteria"]] == ["Accuracy"]
    assert missing.status_code == 404


@pytest.fixture
def trusted_override(tenant, team):
    rubric_version_create(tenant=tenant, criteria=[CriterionDraft("Accuracy")], actor="x")
    return override_row(team["B"], NOW, decided_by="A")  # decided by an agent at trust 0.9


def test_a_proposal_is_opened_and_accepted(tenant, trusted_override, api_as):
    opened = api_as(tenant, role=Role.AGENT).post(
        "/api/v1/rubric-proposals/",
        {
            "override": trusted_override.pk,
            "action": "add",
            "criterion": "Brevity",
            "description": "Short.",
            "rationale": "Too long.",
        },
        format="json",
    )
    proposal_id = opened.json()["id"]

    accepted = api_as(tenant, role=Role.ADMIN).post(
        f"/api/v1/rubric-proposals/{proposal_id}/accept/", {"note": "Yes."}, format="json"
    )

    assert opened.status_code == 201
    assert (opened.json()["proposed_by"], opened.json()["proposer_trust"]) == ("A", 0.9)
    assert accepted.status_code == 200
    assert (accepted.json()["status"], accepted.json()["result_version"]) == ("accepted", 2)
    current = api_as(tenant, role=Role.AGENT).get("/api/v1/rubric/").json()
    assert [c["name"] for c in current["criteria"]] == ["Accuracy", "Brevity"]
    assert current["proposal"] == proposal_id


def test_a_proposal_is_rejected_once(tenant, trusted_override, api_as):
    proposal = RubricProposal.objects.create(
        tenant=tenant,
        override=trusted_override,
        proposed_by="A",
        proposer_trust=0.9,
        created_at=NOW,
        action="add",
        criterion="Brevity",
    )
    admin = api_as(tenant, role=Role.ADMIN)

    rejected = admin.post(f"/api/v1/rubric-proposals/{proposal.pk}/reject/", {}, format="json")
    again = admin.post(f"/api/v1/rubric-proposals/{proposal.pk}/accept/", {}, format="json")
    listed = admin.get("/api/v1/rubric-proposals/", {"status": "rejected"}).json()["results"]

    assert rejected.json()["status"] == "rejected"
    assert (again.status_code, error_code(again)) == (409, "proposal_already_decided")
    assert [p["id"] for p in listed] == [proposal.pk]


def test_proposals_need_a_tenant_wide_key(tenant, team, trusted_override, api_as):
    response = api_as(tenant, role=Role.REVIEWER, agent=team["A"]).post(
        "/api/v1/rubric-proposals/",
        {"override": trusted_override.pk, "action": "add", "criterion": "Brevity"},
        format="json",
    )

    assert (response.status_code, error_code(response)) == (403, "agent_scoped_key")


def test_an_untrusted_decision_maker_is_refused(tenant, team, trusted_override, api_as):
    override = override_row(team["B"], NOW, decided_by="Low")

    response = api_as(tenant, role=Role.AGENT).post(
        "/api/v1/rubric-proposals/",
        {"override": override.pk, "action": "add", "criterion": "Brevity"},
        format="json",
    )

    assert (response.status_code, error_code(response)) == (403, "decision_maker_not_trusted")
    assert response.json()["error"]["details"]["trust"] == 0.1


def test_another_tenants_override_is_not_found(tenant, other_tenant, trusted_override, api_as):
    response = api_as(other_tenant, role=Role.ADMIN).post(
        "/api/v1/rubric-proposals/",
        {"override": trusted_override.pk, "action": "add", "criterion": "Brevity"},
        format="json",
    )

    assert (response.status_code, error_code(response)) == (404, "not_found")
