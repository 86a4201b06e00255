"""The client against the real server: agents, API keys, the event ledger, recall settings, jobs;
typed errors and the Idempotency-Key it sends on every POST."""

from __future__ import annotations

import pytest
from ledgered_memory import (
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    NotFoundError,
    PermissionDeniedError,
    UnprocessableError,
)

from ledger.models import Agent, Event
from tests.clients.threads import run_async

NOTE = "agent.note"


def test_it_manages_agents(admin: Client):
    created = admin.agents_create(name="Creator1", model="m-1", primary_role="creator")
    assert created["name"] == "Creator1"
    assert admin.agents_get(created["id"])["model"] == "m-1"
    assert admin.agents_update(created["id"], model="m-2")["model"] == "m-2"
    replaced = admin.agents_replace(created["id"], name="Creator1", primary_role="reviewer")
    assert replaced["primary_role"] == "reviewer"
    admin.agents_create(name="Reviewer1", primary_role="reviewer")
    names = [a["name"] for a in admin.agents_iter(primary_role="reviewer")]
    assert sorted(names) == ["Creator1", "Reviewer1"]
    admin.agents_delete(created["id"])
    with pytest.raises(NotFoundError) as caught:
        admin.agents_get(created["id"])
    assert caught.value.code == "not_found"
    assert caught.value.status == 404


def test_it_creates_lists_and_revokes_api_keys(tenant_keys, admin: Client):
    admin.agents_create(name="Scoped")
    made = admin.api_keys_create(name="scoped key", role="agent", agent="Scoped")
    assert made["key"]
    assert admin.api_keys_get(made["id"])["name"] == "scoped key"
    assert made["id"] in [k["id"] for k in admin.api_keys_iter(page_size=1)]
    with tenant_keys.client(made["key"]) as scoped:
        assert [a["name"] for a in scoped.trust_iter()] == ["Scoped"]
        admin.api_keys_revoke(made["id"])
        with pytest.raises(AuthenticationError) as caught:
            scoped.trust_list()
    assert caught.value.code == "invalid_api_key"


def test_it_appends_reads_pages_and_verifies_events(admin: Client):
    first = admin.events_create(kind=NOTE, actor="system", run_id="run-1", payload={"n": 1})
    batch = admin.events_create_batch(
        events=[
            {"kind": NOTE, "actor": "system", "run_id": "run-1", "payload": {"n": n}}
            for n in (2, 3, 4)
        ]
    )
    assert [e["payload"]["n"] for e in batch["events"]] == [2, 3, 4]
    assert admin.events_get(first["seq"])["payload"] == {"n": 1}
    page = admin.events_list(run_id="run-1", page_size=2)
    assert len(page.results) == 2
    assert page.next_cursor is not None
    seqs = [e["seq"] for e in admin.events_iter(run_id="run-1", page_size=2)]
    assert len(seqs) == 4
    assert len(set(seqs)) == 4
    assert admin.events_verify()["ok"] is True


def test_it_keeps_the_receipt_of_its_last_write_and_checks_it(tenant_keys, admin: Client):
    assert admin.last_receipt is None
    written = admin.events_create(kind=NOTE, actor="system", payload={"n": 1})
    receipt = admin.last_receipt
    assert receipt == f"{tenant_keys.slug}:{written['seq']}:{written['hash']}"
    assert receipt is not None
    admin.events_list()  # a read leaves the receipt of the last write alone
    assert admin.last_receipt == receipt

    report = admin.events_verify_receipt(receipt=receipt)

    assert report == {"ok": True, "receipt": receipt, "code": "", "reason": ""}
    with pytest.raises(BadRequestError) as caught:
        admin.events_verify_receipt(receipt="not a receipt")
    assert caught.value.code == "invalid_receipt"


def test_it_reads_and_changes_recall_settings_and_lists_jobs(admin: Client):
    assert admin.recall_settings_update(max_recent=7)["max_recent"] == 7
    assert admin.recall_settings_get()["max_recent"] == 7
    jobs = admin.jobs_list()["results"]
    assert "memory.decay" in [job["name"] for job in jobs]


def test_it_raises_typed_errors_with_the_servers_code(tenant_keys, admin: Client):
    with pytest.raises(BadRequestError) as caught:
        admin.agents_create(name="")
    assert caught.value.code == "invalid_agent_name"
    assert caught.value.details["reason"] == "empty"
    reviewer = tenant_keys.client(tenant_keys.reviewer)
    with pytest.raises(PermissionDeniedError) as denied:
        reviewer.agents_create(name="Nope")
    assert denied.value.code == "permission_denied"
    with pytest.raises(AuthenticationError):
        tenant_keys.client("am_not-a-real-key").agents_list()
    assert not Agent.objects.filter(name="Nope").exists()


def test_a_repeated_idempotency_key_writes_once(admin: Client):
    first = admin.events_create(kind=NOTE, actor="system", payload={"x": 1}, idempotency_key="k1")
    again = admin.events_create(kind=NOTE, actor="system", payload={"x": 1}, idempotency_key="k1")
    assert again["seq"] == first["seq"]
    assert Event.objects.filter(kind=NOTE).count() == 1
    with pytest.raises(UnprocessableError) as caught:
        admin.events_create(kind=NOTE, actor="system", payload={"x": 2}, idempotency_key="k1")
    assert caught.value.code == "idempotency_key_reused"


def test_every_post_carries_a_fresh_idempotency_key(admin: Client):
    # Two identical calls without an explicit key are two writes: each call has its own key.
    admin.events_create(kind=NOTE, actor="system", payload={"x": 1})
    admin.events_create(kind=NOTE, actor="system", payload={"x": 1})
    assert Event.objects.filter(kind=NOTE).count() == 2


def test_the_async_client_does_the_same(tenant_keys):
    async def scenario() -> list[str]:
        async with AsyncClient(base_url=tenant_keys.base_url, api_key=tenant_keys.admin) as api:
            for name in ("A1", "A2", "A3"):
                await api.agents_create(name=name)
            with pytest.raises(NotFoundError):
                await api.agents_get(999_999)
            return [agent["name"] async for agent in api.agents_iter(page_size=2)]

    assert run_async(scenario()) == ["A1", "A2", "A3"]
