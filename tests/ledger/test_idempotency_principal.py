"""A replay is only ever for the principal that made the first request (issue 18).

Idempotency records belong to the API key that sent them. The same ``Idempotency-Key`` and body
sent with another key (another agent's, a tenant-wide one, or a second key of the same agent) is
another request: it runs afresh, neither replayed nor refused, so it learns nothing of the first.
"""

from __future__ import annotations

import pytest

from ledger.models import Event, IdempotencyRecord, Role
from memory.episodic.services import MemoryDraft, memories_store

pytestmark = pytest.mark.django_db

SEARCH = {"query": "the launch code", "top_k": 10}


@pytest.fixture
def alice(tenant, make_agent):
    agent = make_agent(tenant, name="Alice")
    memories_store(agent=agent, drafts=[MemoryDraft(content="the launch code is 0451")], actor="x")
    return agent


@pytest.fixture
def bob(tenant, make_agent):
    agent = make_agent(tenant, name="Bob")
    memories_store(
        agent=agent, drafts=[MemoryDraft(content="the launch code is unknown")], actor="x"
    )
    return agent


def search(client, key: str = "same-key"):
    return client.post("/api/v1/memories/search/", SEARCH, format="json", HTTP_IDEMPOTENCY_KEY=key)


def contents(response) -> list[str]:
    return [hit["content"] for hit in response.json()["results"]]


def test_another_agents_key_never_gets_the_first_agents_answer(tenant, alice, bob, api_as):
    first = search(api_as(tenant, role=Role.AGENT, agent=alice))

    second = search(api_as(tenant, role=Role.AGENT, agent=bob))

    assert "the launch code is 0451" in contents(first)
    assert second.status_code == 200
    assert "Idempotent-Replayed" not in second.headers
    assert "the launch code is 0451" not in contents(second)
    assert "the launch code is unknown" in contents(second)


def test_the_same_key_of_the_same_principal_still_replays(tenant, alice, api_as):
    client = api_as(tenant, role=Role.AGENT, agent=alice)

    first, again = search(client), search(client)

    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()


def test_a_second_key_of_the_same_agent_runs_afresh(tenant, alice, api_as):
    # A rotated key is another principal: the old key's answers stay with the old key.
    old, new = (api_as(tenant, role=Role.AGENT, agent=alice) for _ in range(2))
    body = {"kind": "agent.spoke", "payload": {"text": "once per key"}}

    answers = [
        client.post("/api/v1/events/", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
        for client in (old, new)
    ]

    assert [a.status_code for a in answers] == [201, 201]
    assert answers[0].json()["seq"] != answers[1].json()["seq"]
    assert Event.objects.filter(tenant=tenant, payload__text="once per key").count() == 2
    assert IdempotencyRecord.objects.filter(key="k").count() == 2


def test_another_principal_reusing_a_key_with_another_body_is_not_told_it_exists(
    tenant, alice, bob, api_as
):
    search(api_as(tenant, role=Role.AGENT, agent=alice))

    other = api_as(tenant, role=Role.AGENT, agent=bob).post(
        "/api/v1/memories/search/",
        {"query": "something else", "top_k": 3},
        format="json",
        HTTP_IDEMPOTENCY_KEY="same-key",
    )

    assert other.status_code == 200  # not 422 idempotency_key_reused: that would leak the key
    assert "Idempotent-Replayed" not in other.headers


def test_a_tenant_wide_key_and_an_agent_key_do_not_share_answers(tenant, alice, api_as):
    scoped = search(api_as(tenant, role=Role.AGENT, agent=alice))

    tenant_wide = api_as(tenant, role=Role.ADMIN).post(
        "/api/v1/memories/search/",
        {**SEARCH, "agent": "Alice"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="same-key",
    )

    assert scoped.status_code == tenant_wide.status_code == 200
    assert "Idempotent-Replayed" not in tenant_wide.headers
