"""Bulk updates and deletes of memories (memory.episodic.bulk) over the API, on real PostgreSQL:
one ledger event per memory through the single-memory services, a dry run, limits with a
continuation, idempotency, agent scoping, and a rebuild that replays it all."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from ledger.models import Event, Role
from ledger.projections import registered_projections
from memory.episodic import bulk
from memory.episodic.services import MemoryDraft, memories_store
from memory.models import Memory, MemoryKey

pytestmark = pytest.mark.django_db

UPDATE = "/api/v1/memories/bulk-update/"
DELETE = "/api/v1/memories/bulk-delete/"


@pytest.fixture
def planner(tenant, make_agent):
    return make_agent(tenant, name="Planner")


@pytest.fixture
def other(tenant, make_agent):
    return make_agent(tenant, name="Other")


@pytest.fixture
def stored(planner, other, no_embedder):
    def store(agent, content, **fields):
        return memories_store(
            agent=agent, drafts=[MemoryDraft(content=content, **fields)], actor="system"
        )[0]

    memories = {
        "a": store(planner, "invoice for acme", session_id="s1", tags=["billing"],
                   metadata={"customer": "acme"}),
        "b": store(planner, "invoice for globex", session_id="s1", tags=["billing", "old"],
                   metadata={"customer": "globex"}),
        "c": store(planner, "standup notes", session_id="s2", tags=["ops"]),
        "d": store(planner, "acme call", session_id="s2", metadata={"customer": "acme"}),
        "x": store(other, "other's acme note", session_id="s1", metadata={"customer": "acme"}),
    }  # fmt: skip
    return memories


@pytest.fixture
def api(tenant, planner, api_as, stored):
    return api_as(tenant, role=Role.AGENT, agent=planner)


def events(kind):
    return list(Event.objects.filter(kind=kind).order_by("seq"))


def test_a_dry_run_counts_and_samples_and_changes_nothing(api, stored):
    before = Event.objects.count()

    answer = api.post(
        DELETE, {"filter": {"metadata": {"customer": "acme"}}, "dry_run": True}, format="json"
    )

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["dry_run"], body["matched"], body["done"]) == (True, 2, 0)
    assert body["ids"] == [stored["a"].pk, stored["d"].pk]  # the other agent's acme is not here
    assert Event.objects.count() == before
    assert Memory.objects.count() == 5


def test_a_bulk_update_changes_each_memory_with_one_event_each(api, stored):
    moment = (timezone.now() + timedelta(days=30)).replace(microsecond=0)
    answer = api.post(
        UPDATE,
        {
            "filter": {"tags": "billing"},
            "changes": {
                "importance": 0.9,
                "tags_add": ["finance"],
                "tags_remove": ["old"],
                "metadata_merge": {"reviewed": True},
                "expires_at": moment.isoformat(),
            },
        },
        format="json",
    )

    assert answer.status_code == 200, answer.content
    assert answer.json()["done"] == 2
    a, b = (Memory.objects.get(pk=stored[k].pk) for k in "ab")
    assert (a.importance, a.tags) == (0.9, ["billing", "finance"])
    assert a.metadata == {"customer": "acme", "reviewed": True}
    assert b.tags == ["billing", "finance"]
    assert a.expires_at == moment
    updated = events("memory.updated")
    assert sorted(e.payload["memory_id"] for e in updated) == sorted([a.pk, b.pk])


def test_a_memory_the_update_would_not_change_gets_no_event(api, stored):
    answer = api.post(
        UPDATE, {"ids": [stored["c"].pk], "changes": {"tags_add": ["ops"]}}, format="json"
    )

    assert (answer.json()["matched"], answer.json()["done"]) == (1, 0)
    assert events("memory.updated") == []


def test_a_bulk_delete_by_ids_shreds_each_and_names_ids_that_are_not_the_agents(api, stored):
    ids = [stored["a"].pk, stored["c"].pk, stored["x"].pk, 999_999]

    answer = api.post(DELETE, {"ids": ids, "reason": "user asked"}, format="json")

    body = answer.json()
    assert (body["done"], body["ids"]) == (2, [stored["a"].pk, stored["c"].pk])
    assert body["not_found"] == [stored["x"].pk, 999_999]
    assert not Memory.objects.filter(pk__in=[stored["a"].pk, stored["c"].pk]).exists()
    assert not MemoryKey.objects.filter(memory_id__in=[stored["a"].pk, stored["c"].pk]).exists()
    assert Memory.objects.filter(pk=stored["x"].pk).exists()
    deleted = events("memory.deleted")
    assert [(e.payload["memory_id"], e.payload["reason"]) for e in deleted] == [
        (stored["a"].pk, "user asked"),
        (stored["c"].pk, "user asked"),
    ]


def test_an_agent_scoped_key_cannot_name_another_agent(api, stored):
    answer = api.post(DELETE, {"agent": "Other", "ids": [stored["x"].pk]}, format="json")

    assert answer.status_code == 404
    assert Memory.objects.filter(pk=stored["x"].pk).exists()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "bulk_selection_required"),
        ({"filter": {}}, "bulk_selection_required"),
        ({"all": True}, "confirmation_required"),
        ({"all": True, "ids": [1], "confirm": True}, "bulk_selection_conflict"),
        ({"session_id": "s1", "ids": [1]}, "bulk_selection_conflict"),
        ({"filter": {"colour": "red"}}, "filter_unknown_field"),
        ({"ids": [1], "limit": 0}, "bulk_too_many"),
    ],
)
def test_a_bulk_request_that_does_not_say_what_it_means_is_refused(api, body, code):
    answer = api.post(DELETE, body, format="json")

    assert (answer.status_code, answer.json()["error"]["code"]) == (400, code)
    assert Memory.objects.count() == 5


def test_a_bulk_update_must_say_what_changes(api, stored):
    answer = api.post(UPDATE, {"ids": [stored["a"].pk], "changes": {}}, format="json")

    assert answer.json()["error"]["code"] == "bulk_changes_required"


def test_too_many_ids_is_refused_with_a_code_to_page(api, monkeypatch):
    monkeypatch.setattr(bulk, "BULK_MAX_MEMORIES", 2)

    answer = api.post(DELETE, {"ids": [1, 2, 3]}, format="json")

    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "bulk_too_many")


def test_delete_all_of_a_session_then_of_the_agent_with_confirm(api, stored, planner):
    session = api.post(DELETE, {"all": True, "session_id": "s2", "confirm": True}, format="json")
    Memory.objects.filter(pk=stored["a"].pk).update(archived_at=timezone.now())

    assert session.json()["done"] == 2
    everything = api.post(DELETE, {"all": True, "confirm": True}, format="json")

    assert everything.json()["done"] == 2  # archived ones too
    assert not Memory.objects.filter(agent=planner).exists()
    assert Memory.objects.filter(pk=stored["x"].pk).exists()


def test_a_large_selection_is_handled_a_page_at_a_time(api, stored, planner):
    body = {"filter": {"session_id": {"in": ["s1", "s2"]}}, "changes": {"importance": 0.3}}
    pages = []
    after = None
    while True:
        answer = api.post(UPDATE, {**body, "limit": 3, **({"after": after} if after else {})},
                          format="json").json()  # fmt: skip
        pages.append((answer["done"], answer["remaining"]))
        after = answer["continue_after"]
        if after is None:
            break

    assert pages == [(3, 1), (1, 0)]
    assert set(Memory.objects.filter(agent=planner).values_list("importance", flat=True)) == {0.3}
    assert len(events("memory.updated")) == 4  # each once, though the filter still matches


def test_a_retried_bulk_delete_replays_the_first_answer(api, stored):
    body = {"filter": {"session_id": "s1"}, "limit": 1}

    first = api.post(DELETE, body, format="json", HTTP_IDEMPOTENCY_KEY="bulk-1")
    again = api.post(DELETE, body, format="json", HTTP_IDEMPOTENCY_KEY="bulk-1")

    assert first.json()["continue_after"] == stored["a"].pk
    assert first.json() == again.json()
    assert again["Idempotent-Replayed"] == "true"
    assert len(events("memory.deleted")) == 1


def test_a_rebuild_replays_bulk_updates_and_deletes(api, stored, tenant):
    api.post(UPDATE, {"filter": {"metadata": {"customer": "acme"}},
                      "changes": {"tags_add": ["vip"], "metadata_remove": ["customer"]}},
             format="json")  # fmt: skip
    api.post(DELETE, {"filter": {"tags": "ops"}}, format="json")
    before = {p.name: p.snapshot(tenant=tenant) for p in registered_projections()}
    out = StringIO()

    call_command("rebuild_projections", "--check", stdout=out)
    call_command("rebuild_projections", stdout=out)

    assert "DIFFERED" not in out.getvalue()
    assert {p.name: p.snapshot(tenant=tenant) for p in registered_projections()} == before
    assert Memory.objects.get(pk=stored["d"].pk).metadata == {}
    assert not Memory.objects.filter(pk=stored["c"].pk).exists()
