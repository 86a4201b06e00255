"""Every request that appended events is answered with a receipt, and a receipt from before a
rewritten or removed tail no longer verifies.

``transaction=True``: a receipt is issued once the request's transaction commits, so the test's
own rolled-back transaction would hide it.
"""

from __future__ import annotations

import pytest

from ledger.models import Agent, Event, Role
from ledger.receipts import HEADER
from tests.ledger.test_chain import append_n
from tests.tampering import events_delete, rewrite_tail, tamper

pytestmark = pytest.mark.django_db(transaction=True)


def spoken(text: str = "hello") -> dict:
    return {"kind": "agent.spoke", "actor": "system", "payload": {"text": text}}


def head(tenant) -> Event:
    return Event.objects.filter(tenant=tenant).latest("seq")


def verify(api, receipt: str):
    return api.post("/api/v1/events/verify-receipt/", {"receipt": receipt}, format="json")


WRITERS = {
    "events create": ("post", "/api/v1/events/", lambda agent: spoken()),
    "events batch": (
        "post",
        "/api/v1/events/batch/",
        lambda agent: {"events": [spoken("a"), spoken("b")]},
    ),
    "agents create": ("post", "/api/v1/agents/", lambda agent: {"name": "Reviewer9"}),
    "agents update": ("patch", "/api/v1/agents/{agent}/", lambda agent: {"model": "m-2"}),
    "agents delete": ("delete", "/api/v1/agents/{agent}/", lambda agent: None),
    "api keys create": ("post", "/api/v1/api-keys/", lambda agent: {"name": "k", "role": "agent"}),
    "recall settings": (
        "patch",
        "/api/v1/recall-settings/",
        lambda agent: {"globally_visible_kinds": ["world.observed"]},
    ),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_every_answer_that_appended_events_carries_a_receipt_of_the_new_head(
    tenant, make_agent, api_as, writer
):
    agent = make_agent(tenant, name="Creator1")
    method, path, body = WRITERS[writer]
    api = api_as(tenant, role=Role.ADMIN)

    response = getattr(api, method)(path.format(agent=agent.pk), body(agent), format="json")

    assert response.status_code < 300, response.content
    event = head(tenant)
    assert response[HEADER] == f"acme:{event.seq}:{event.hash}"


def test_answers_that_appended_nothing_carry_no_receipt(tenant, api_as):
    api = api_as(tenant, role=Role.ADMIN)

    read = api.get("/api/v1/events/")
    refused = api.post("/api/v1/events/", {"kind": "Not A Kind"}, format="json")

    assert read.status_code == 200
    assert refused.status_code == 400
    assert HEADER not in read
    assert HEADER not in refused


def test_a_refused_request_that_had_appended_gets_no_receipt(tenant, make_agent, api_as):
    make_agent(tenant, name="Creator1")
    api = api_as(tenant, role=Role.ADMIN)

    # The second agent's name is taken: its append rolls back with the refused insert.
    response = api.post("/api/v1/agents/", {"name": "Creator1"}, format="json")

    assert response.status_code == 409
    assert HEADER not in response


def test_a_receipt_verifies_while_the_ledger_holds_its_history(tenant, api_as):
    writer = api_as(tenant, role=Role.AGENT)
    receipt = writer.post("/api/v1/events/", spoken(), format="json")[HEADER]
    append_n(tenant, 2)  # later events do not matter to an earlier receipt

    response = verify(writer, receipt)

    assert response.status_code == 200
    assert response.json() == {"ok": True, "receipt": receipt, "code": "", "reason": ""}


def test_a_receipt_from_before_a_rewritten_tail_fails(tenant, api_as):
    writer = api_as(tenant, role=Role.AGENT)
    first = writer.post("/api/v1/events/", spoken("one"), format="json")
    writer.post("/api/v1/events/", spoken("two"), format="json")
    receipt = writer.post("/api/v1/events/", spoken("three"), format="json")[HEADER]

    # No checkpoint was made: only the receipt knows what the tail looked like.
    rewrite_tail(tenant, from_seq=first.json()["seq"], payload={"text": "forged"})
    body = verify(writer, receipt).json()

    assert body["ok"] is False
    assert body["code"] == "receipt_mismatch"
    assert "rewritten" in body["reason"]


def test_a_receipt_of_a_deleted_last_event_fails_as_truncation(tenant, api_as):
    writer = api_as(tenant, role=Role.AGENT)
    receipt = writer.post("/api/v1/events/", spoken(), format="json")[HEADER]

    gone = head(tenant).pk
    events_delete("id = %s", [gone])
    body = verify(writer, receipt).json()

    assert (body["ok"], body["code"]) == (False, "ledger_truncated")


def test_a_receipt_over_an_edited_earlier_event_fails(tenant, api_as):
    writer = api_as(tenant, role=Role.AGENT)
    receipt = writer.post("/api/v1/events/", spoken(), format="json")[HEADER]

    tamper(
        "UPDATE ledger_event SET actor = 'mallory' WHERE tenant_id = %s AND seq = 1", [tenant.pk]
    )
    body = verify(writer, receipt).json()

    assert (body["ok"], body["code"]) == (False, "hash_mismatch")


@pytest.mark.parametrize(
    "receipt",
    ["", "acme", "acme:1", "acme:0:" + "a" * 64, "acme:1:" + "a" * 63, "acme:x:" + "a" * 64],
)
def test_a_malformed_receipt_is_a_400(tenant, api_as, receipt):
    response = verify(api_as(tenant, role=Role.AGENT), receipt)

    assert response.status_code == 400
    assert response.json()["error"]["code"] in {"invalid_receipt", "validation_error"}


def test_another_tenants_receipt_is_refused_without_saying_more(tenant, other_tenant, api_as):
    theirs = api_as(other_tenant).post("/api/v1/events/", spoken(), format="json")[HEADER]

    response = verify(api_as(tenant, role=Role.AGENT), theirs)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_receipt"
    assert "globex" not in response.content.decode()


def test_an_agent_scoped_key_may_check_its_receipts(tenant, make_agent, api_as):
    agent: Agent = make_agent(tenant, name="Creator1")
    writer = api_as(tenant, role=Role.AGENT, agent=agent)
    receipt = writer.post("/api/v1/events/", {**spoken(), "actor": "Creator1"}, format="json")[
        HEADER
    ]

    assert verify(writer, receipt).json()["ok"] is True
