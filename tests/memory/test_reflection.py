from __future__ import annotations

import pytest

from ledger.models import Event, RecallSettings, Role
from ledger.services import EventDraft, events_append
from memory.recall.selectors import recall_episodic, recall_salience
from memory.recall.services import (
    reflection_create_if_due,
    reflection_state,
    reflections_create_due,
)
from tests.concurrency import run_concurrently
from tests.standins import openai_standin

RUN = "run_1"


def beats(tenant, count: int, actor: str = "system", kind: str = "world.observed", start: int = 0):
    return events_append(
        tenant=tenant,
        drafts=[
            EventDraft(
                kind=kind,
                actor=actor,
                run_id=RUN,
                turn=start + i,
                payload={"text": f"beat {i}. more"},
            )
            for i in range(count)
        ],
    )


@pytest.fixture
def creator(tenant, make_agent):
    RecallSettings.objects.create(tenant=tenant, reflection_threshold=4)
    return make_agent(tenant, name="Creator1")


@pytest.mark.django_db
def test_a_reflection_is_due_every_threshold_qualifying_events(tenant, creator):
    beats(tenant, 3)
    assert reflection_state(agent=creator, run_id=RUN).due is False

    beats(tenant, 1, start=3)

    assert reflection_state(agent=creator, run_id=RUN).due is True


@pytest.mark.django_db
def test_peer_speech_does_not_count_toward_reflection(tenant, creator, make_agent):
    make_agent(tenant, name="Reviewer1")
    beats(tenant, 10, actor="Reviewer1", kind="agent.spoke")

    assert reflection_state(agent=creator, run_id=RUN).qualifying_events == 0


@pytest.mark.django_db
def test_the_reflection_compacts_recent_visible_events_and_is_made_once(tenant, creator):
    beats(tenant, 4)

    first = reflection_create_if_due(agent=creator, run_id=RUN)
    second = reflection_create_if_due(agent=creator, run_id=RUN)

    assert first is not None
    assert second is None
    assert first.kind == "agent.reflected"
    assert first.actor == "Creator1"
    summary = first.payload["summary"]
    assert summary.startswith("Over turns 0-3 (4 events):")
    assert "beat 3." in summary
    assert first.payload["summariser"] == "local"
    assert first.payload["covers"]["events"] == 4


@pytest.mark.django_db
def test_the_local_summary_is_deterministic(tenant, creator):
    beats(tenant, 4)
    summary = reflection_create_if_due(agent=creator, run_id=RUN, force=True).payload["summary"]
    again = reflection_create_if_due(agent=creator, run_id=RUN, force=True).payload["summary"]

    # The second covers only what came after the first reflection: nothing but itself.
    assert summary != again
    assert (
        reflection_create_if_due(agent=creator, run_id=RUN, force=True).payload["summary"] == again
    )


@pytest.mark.django_db
def test_an_llm_endpoint_writes_the_summary_when_configured(tenant, creator, settings):
    beats(tenant, 4)
    with openai_standin() as standin:
        settings.REFLECTION_LLM_URL = standin.url
        settings.REFLECTION_LLM_API_KEY = "llm-key"

        event = reflection_create_if_due(agent=creator, run_id=RUN)

    assert event.payload["summariser"] == "llm"
    assert event.payload["summary"] == standin.chat_reply
    sent = standin.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["auth"] == "Bearer llm-key"
    assert "[turn 003][world.observed] beat 3. more" in sent["body"]["messages"][1]["content"]


@pytest.mark.django_db
def test_a_failing_llm_falls_back_to_the_local_summary(tenant, creator, settings):
    beats(tenant, 4)
    with openai_standin() as standin:
        standin.fail_with = 503
        settings.REFLECTION_LLM_URL = standin.url

        event = reflection_create_if_due(agent=creator, run_id=RUN)

    assert event.payload["summariser"] == "local"
    assert "503" in event.payload["llm_error"]
    assert event.payload["summary"].startswith("Over turns")


@pytest.mark.django_db(transaction=True)
def test_concurrent_checks_reflect_once(tenant, creator):
    beats(tenant, 4)

    run_concurrently(lambda _: reflection_create_if_due(agent=creator, run_id=RUN), 4)

    assert Event.objects.filter(tenant=tenant, kind="agent.reflected").count() == 1


@pytest.mark.django_db
def test_the_reflections_api_reports_state(tenant, creator, api_as):
    beats(tenant, 4)
    client = api_as(tenant, role=Role.AGENT, agent=creator)

    made = client.post("/api/v1/reflections/", {"run_id": RUN}, format="json")
    again = client.post("/api/v1/reflections/", {"run_id": RUN}, format="json")

    assert made.status_code == 201
    assert made.json()["event"]["kind"] == "agent.reflected"
    assert again.status_code == 200
    assert again.json() == {
        "created": False,
        "qualifying_events": 4,
        "reflections_made": 1,
        "threshold": 4,
        "event": None,
    }


SECRET = "periwinkle"


def thoughts(tenant, actor: str, count: int = 10):
    return events_append(
        tenant=tenant,
        drafts=[
            EventDraft(
                kind="agent.thought",
                actor=actor,
                run_id=RUN,
                turn=turn,
                payload={"text": f"The secret word is {SECRET}. Thought {turn}."},
            )
            for turn in range(count)
        ],
    )


@pytest.fixture
def alice_and_bob(tenant, make_agent):
    return make_agent(tenant, name="Alice"), make_agent(tenant, name="Bob")


def recalled(client, agent: str, **fields) -> str:
    response = client.post(
        "/api/v1/recall/", {"agent": agent, "run_id": RUN, **fields}, format="json"
    )
    assert response.status_code == 200
    return response.json()["prompt"]


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["episodic", "salience"])
def test_a_reflection_of_private_thoughts_stays_private_to_its_agent(
    tenant, alice_and_bob, api_as, mode
):
    alice, bob = alice_and_bob
    thoughts(tenant, "Alice")
    alice_client = api_as(tenant, role=Role.AGENT, agent=alice)
    made = alice_client.post("/api/v1/reflections/", {"run_id": RUN}, format="json")
    assert made.status_code == 201
    assert SECRET in made.json()["event"]["payload"]["summary"]
    fields = {"mode": mode, "query": f"secret word {SECRET}"}

    bobs = recalled(api_as(tenant, role=Role.AGENT, agent=bob), "Bob", **fields)
    alices = recalled(alice_client, "Alice", **fields)
    # A tenant-wide key recalling as Bob gets Bob's view, as it would of the thoughts.
    as_bob = recalled(api_as(tenant, role=Role.ADMIN), "Bob", **fields)

    assert SECRET not in bobs
    assert SECRET not in as_bob
    assert "[agent.reflected]" in alices


@pytest.mark.django_db
def test_a_reflection_mixing_private_and_public_sources_is_private(tenant, alice_and_bob):
    alice, bob = alice_and_bob
    beats(tenant, 5)
    thoughts(tenant, "Alice", count=1)

    event = reflection_create_if_due(agent=alice, run_id=RUN, force=True)

    assert event.payload["source_kinds"] == ["agent.thought", "world.observed"]
    assert "agent.reflected" not in recall_episodic(agent=bob, run_id=RUN).prompt
    assert "agent.reflected" in recall_episodic(agent=alice, run_id=RUN).prompt


@pytest.mark.django_db
def test_a_reflection_of_public_events_only_is_seen_by_peers(tenant, alice_and_bob):
    alice, bob = alice_and_bob
    beats(tenant, 3)
    beats(tenant, 2, actor="Alice", kind="agent.spoke", start=3)

    event = reflection_create_if_due(agent=alice, run_id=RUN, force=True)

    assert event.payload["source_kinds"] == ["agent.spoke", "world.observed"]
    assert "agent.reflected" in recall_episodic(agent=bob, run_id=RUN).prompt


@pytest.mark.django_db
def test_a_reflection_over_a_peers_private_reflection_does_not_see_it(tenant, alice_and_bob):
    alice, bob = alice_and_bob
    thoughts(tenant, "Alice")
    reflection_create_if_due(agent=alice, run_id=RUN, force=True)
    beats(tenant, 2, start=10)

    bobs = reflection_create_if_due(agent=bob, run_id=RUN, force=True)

    assert SECRET not in bobs.payload["summary"]
    assert bobs.payload["source_kinds"] == ["world.observed"]


@pytest.mark.django_db
def test_a_reflection_written_before_sources_were_recorded_is_private_to_its_agent(
    tenant, alice_and_bob
):
    alice, bob = alice_and_bob
    thoughts(tenant, "Alice", count=2)
    # The payload the service wrote before it recorded source kinds.
    events_append(
        tenant=tenant,
        drafts=[
            EventDraft(
                kind="agent.reflected",
                actor="Alice",
                run_id=RUN,
                turn=1,
                payload={
                    "summariser": "local",
                    "summary": f"Over turns 0-1 (2 events): The secret word is {SECRET}.",
                    "covers": {"from_seq": 1, "to_seq": 2, "events": 2},
                },
            )
        ],
    )

    assert SECRET not in recall_episodic(agent=bob, run_id=RUN).prompt
    assert SECRET not in recall_salience(agent=bob, run_id=RUN, query=SECRET).prompt
    assert "agent.reflected" in recall_episodic(agent=alice, run_id=RUN).prompt


@pytest.mark.django_db
def test_the_periodic_job_makes_private_reflections_private_too(tenant, alice_and_bob):
    alice, bob = alice_and_bob
    (first,) = thoughts(tenant, "Alice", count=1)
    thoughts(tenant, "Alice", count=9)

    created = reflections_create_due(after_event_id=first.pk - 1, up_to_event_id=first.pk + 9)

    assert created == 1
    assert SECRET not in recall_episodic(agent=bob, run_id=RUN).prompt
    assert "agent.reflected" in recall_episodic(agent=alice, run_id=RUN).prompt


@pytest.mark.django_db
def test_a_peers_private_reflection_does_not_count_toward_reflecting(tenant, alice_and_bob):
    alice, bob = alice_and_bob
    thoughts(tenant, "Alice", count=4)
    reflection_create_if_due(agent=alice, run_id=RUN, force=True)
    beats(tenant, 3)

    # The beats count; Alice's reflection, which Bob may not see, does not betray itself.
    assert reflection_state(agent=bob, run_id=RUN).qualifying_events == 3
