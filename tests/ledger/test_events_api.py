from __future__ import annotations

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from config.api import ApiError
from ledger.models import Event, RecallSettings, Role
from ledger.services import EventDraft, event_append, events_append_from_client
from tests.concurrency import run_concurrently

pytestmark = pytest.mark.django_db


def spoken(text: str = "hello", actor: str = "Creator1", **fields) -> dict:
    return {"kind": "agent.spoke", "actor": actor, "payload": {"text": text}, **fields}


@pytest.fixture
def creator(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


@pytest.fixture
def api(tenant, creator, api_as) -> APIClient:
    return api_as(tenant, role=Role.AGENT)


def test_it_appends_an_event_and_returns_its_place_in_the_chain(tenant, api):
    response = api.post(
        "/api/v1/events/", spoken(run_id="run_1", round_id="run_1/round_2", turn=3), format="json"
    )

    assert response.status_code == 201, response.content
    body = response.json()
    stored = Event.objects.get(tenant=tenant, seq=body["seq"])
    assert body["hash"] == stored.hash
    assert (stored.kind, stored.actor, stored.turn, stored.round_id) == (
        "agent.spoke",
        "Creator1",
        3,
        "run_1/round_2",
    )


def test_it_lists_events_with_filters_in_seq_order(tenant, creator, api):
    event_append(tenant=tenant, kind="run.started", actor="system", run_id="r1")
    event_append(tenant=tenant, kind="agent.spoke", actor="Creator1", run_id="r1")
    event_append(tenant=tenant, kind="agent.spoke", actor="Creator1", run_id="r2")
    event_append(tenant=tenant, kind="judge.verdict", actor="system", run_id="r1")

    by_run = api.get("/api/v1/events/?run_id=r1").json()["results"]
    by_kinds = api.get("/api/v1/events/?run_id=r1&kind=run.started,judge.verdict").json()
    by_actor = api.get("/api/v1/events/?actor=Creator1").json()["results"]

    assert [e["kind"] for e in by_run] == ["run.started", "agent.spoke", "judge.verdict"]
    assert [e["kind"] for e in by_kinds["results"]] == ["run.started", "judge.verdict"]
    assert [e["run_id"] for e in by_actor] == ["r1", "r2"]
    seqs = [e["seq"] for e in by_run]
    assert seqs == sorted(seqs)


def test_it_filters_by_time_range(tenant, api):
    first = event_append(tenant=tenant, kind="world.observed", actor="system")
    second = event_append(tenant=tenant, kind="world.observed", actor="system")

    since = api.get("/api/v1/events/", {"since": second.created_at.isoformat()}).json()
    until = api.get("/api/v1/events/", {"until": second.created_at.isoformat()}).json()
    bad = api.get("/api/v1/events/?since=yesterday")

    assert [e["seq"] for e in since["results"]] == [second.seq]
    assert first.seq in [e["seq"] for e in until["results"]]
    assert second.seq not in [e["seq"] for e in until["results"]]
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_filter"


def test_it_pages_through_events_by_seq_without_gaps(tenant, api):
    for index in range(7):
        event_append(tenant=tenant, kind="world.observed", actor="system", turn=index)

    seen, url = [], "/api/v1/events/?page_size=3&kind=world.observed"
    while url:
        page = api.get(url).json()
        seen += [e["turn"] for e in page["results"]]
        url = page["next"]

    assert seen == list(range(7))


def test_it_gets_one_event_by_seq(tenant, api):
    event = event_append(tenant=tenant, kind="clue.found", actor="system", payload={"text": "x"})

    response = api.get(f"/api/v1/events/{event.seq}/")

    assert response.status_code == 200
    assert response.json()["hash"] == event.hash


def test_a_batch_is_appended_in_order(tenant, api):
    response = api.post(
        "/api/v1/events/batch/", {"events": [spoken("a"), spoken("b"), spoken("c")]}, format="json"
    )

    assert response.status_code == 201
    texts = [e["payload"]["text"] for e in response.json()["events"]]
    assert texts == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("bad_event", "code"),
    [
        ({"kind": "Not A Kind", "actor": "system"}, "invalid_kind"),
        ({"kind": "nodots", "actor": "system"}, "invalid_kind"),
        ({"kind": "a." + "b" * 70, "actor": "system"}, "invalid_kind"),
        ({"kind": "agent.registered", "actor": "system", "payload": {}}, "reserved_kind"),
        ({"kind": "api_key.revoked", "actor": "system"}, "reserved_kind"),
        ({"kind": "agent.spoke", "actor": "Nobody"}, "unknown_actor"),
        ({"kind": "agent.spoke", "actor": "system", "turn": -1}, "invalid_turn"),
        ({"kind": "agent.spoke", "actor": "system", "payload": [1, 2]}, "invalid_event"),
        ({"kind": "agent.spoke"}, "invalid_event"),
    ],
)
def test_a_batch_with_one_bad_event_writes_nothing_and_names_it(tenant, api, bad_event, code):
    before = Event.objects.filter(tenant=tenant).count()

    response = api.post(
        "/api/v1/events/batch/", {"events": [spoken("ok"), bad_event, spoken("ok")]}, format="json"
    )

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == code
    assert error["details"]["index"] == 1
    assert Event.objects.filter(tenant=tenant).count() == before


def test_a_payload_over_the_limit_is_a_413(tenant, api):
    with override_settings(LEDGER_MAX_PAYLOAD_BYTES=100):
        response = api.post("/api/v1/events/", spoken("x" * 200), format="json")

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_the_payload_limit_is_the_services_rule_and_names_the_event(tenant):
    small = EventDraft(kind="agent.spoke", actor="system", payload={"text": "fits"})
    large = EventDraft(kind="agent.spoke", actor="system", payload={"text": "x" * 200})

    with override_settings(LEDGER_MAX_PAYLOAD_BYTES=100), pytest.raises(ApiError) as caught:
        events_append_from_client(tenant=tenant, drafts=[small, large])

    assert caught.value.error_code == "payload_too_large"
    assert caught.value.status_code == 413
    assert caught.value.details == {"index": 1}
    assert not Event.objects.filter(tenant=tenant, kind="agent.spoke").exists()


def test_a_retry_with_the_same_idempotency_key_returns_the_first_answer(tenant, api):
    first = api.post("/api/v1/events/", spoken(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    retry = api.post("/api/v1/events/", spoken(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")

    assert first.status_code == retry.status_code == 201
    assert retry.json() == first.json()
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert Event.objects.filter(tenant=tenant, kind="agent.spoke").count() == 1


def test_an_idempotency_key_reused_for_another_request_is_refused(tenant, api):
    api.post("/api/v1/events/", spoken("a"), format="json", HTTP_IDEMPOTENCY_KEY="k-2")

    response = api.post("/api/v1/events/", spoken("b"), format="json", HTTP_IDEMPOTENCY_KEY="k-2")

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Event.objects.filter(tenant=tenant, kind="agent.spoke").count() == 1


def test_a_refused_request_does_not_use_up_its_idempotency_key(tenant, api):
    refused = api.post(
        "/api/v1/events/", spoken(actor="Nobody"), format="json", HTTP_IDEMPOTENCY_KEY="k-3"
    )
    corrected = api.post("/api/v1/events/", spoken(), format="json", HTTP_IDEMPOTENCY_KEY="k-3")

    assert refused.status_code == 400
    assert corrected.status_code == 201


def test_idempotency_keys_are_per_tenant(tenant, other_tenant, creator, make_agent, api, api_as):
    make_agent(other_tenant, name="Creator1")
    other = api_as(other_tenant, role=Role.AGENT)

    mine = api.post("/api/v1/events/", spoken(), format="json", HTTP_IDEMPOTENCY_KEY="same")
    theirs = other.post("/api/v1/events/", spoken(), format="json", HTTP_IDEMPOTENCY_KEY="same")

    assert mine.status_code == theirs.status_code == 201
    assert "Idempotent-Replayed" not in theirs.headers


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_idempotency_key_write_once(tenant, make_agent, make_key):
    make_agent(tenant, name="Creator1")
    _, raw_key = make_key(tenant, role=Role.AGENT)

    def send(_: int) -> tuple[int, dict]:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
        response = client.post(
            "/api/v1/events/", spoken(), format="json", HTTP_IDEMPOTENCY_KEY="race"
        )
        return response.status_code, response.json()

    answers = run_concurrently(send, 4)

    assert [status for status, _ in answers] == [201] * 4
    assert len({body["seq"] for _, body in answers}) == 1
    assert Event.objects.filter(tenant=tenant, kind="agent.spoke").count() == 1


def test_an_agent_key_appends_as_its_agent_only(tenant, creator, make_agent, api_as):
    make_agent(tenant, name="Reviewer1")
    client = api_as(tenant, role=Role.AGENT, agent=creator)

    implicit = client.post("/api/v1/events/", {"kind": "agent.spoke"}, format="json")
    impostor = client.post("/api/v1/events/", spoken(actor="Reviewer1"), format="json")

    assert implicit.status_code == 201
    assert implicit.json()["actor"] == "Creator1"
    assert impostor.status_code == 403
    assert impostor.json()["error"]["code"] == "actor_mismatch"


def test_an_agent_key_sees_only_visible_events_and_no_foreign_secrets(
    tenant, creator, make_agent, api_as
):
    make_agent(tenant, name="Reviewer1")
    event_append(tenant=tenant, kind="agent.thought", actor="Reviewer1", payload={"text": "hm"})
    event_append(
        tenant=tenant,
        kind="agent.spoke",
        actor="Reviewer1",
        payload={"text": "public", "api_token": "s3cret"},
    )
    event_append(tenant=tenant, kind="agent.thought", actor="Creator1", payload={"text": "mine"})
    client = api_as(tenant, role=Role.AGENT, agent=creator)

    events = client.get("/api/v1/events/").json()["results"]

    assert [(e["actor"], e["kind"]) for e in events if e["kind"].startswith("agent.")] == [
        ("Reviewer1", "agent.spoke"),
        ("Creator1", "agent.thought"),
    ]
    assert "s3cret" not in str(events)


def test_visibility_follows_the_tenants_settings(tenant, creator, make_agent, api_as):
    make_agent(tenant, name="Reviewer1")
    event_append(tenant=tenant, kind="agent.spoke", actor="Reviewer1", payload={"text": "hi"})
    RecallSettings.objects.create(tenant=tenant, globally_visible_kinds=["world.observed"])
    client = api_as(tenant, role=Role.AGENT, agent=creator)

    events = client.get("/api/v1/events/?actor=Reviewer1").json()["results"]

    assert events == []


def test_verify_reports_an_intact_chain(tenant, api_as):
    response = api_as(tenant, role=Role.REVIEWER).get("/api/v1/events/verify/")

    assert response.status_code == 200
    assert response.json()["ok"] is True
    assert response.json()["first_broken_seq"] is None


def test_admins_change_the_tenants_recall_rules_and_it_is_logged(tenant, api_as):
    admin = api_as(tenant, role=Role.ADMIN)

    before = admin.get("/api/v1/recall-settings/").json()
    changed = admin.patch(
        "/api/v1/recall-settings/",
        {"globally_visible_kinds": ["world.observed"], "top_k": 3},
        format="json",
    )
    invalid = admin.patch("/api/v1/recall-settings/", {"weight_recency": 2}, format="json")

    assert before["top_k"] == 8
    assert "agent.spoke" in before["globally_visible_kinds"]
    assert changed.status_code == 200
    assert RecallSettings.for_tenant(tenant).globally_visible_kinds == ["world.observed"]
    assert invalid.status_code == 400
    assert "weight_recency" in invalid.json()["error"]["details"]
    logged = Event.objects.get(tenant=tenant, kind="recall_settings.updated")
    assert logged.payload["changes"]["top_k"] == 3
