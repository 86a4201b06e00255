from __future__ import annotations

import pytest

from ledger.models import Event, RecallSettings, Role
from ledger.services import EventDraft, events_append
from memory.reflection import reflection_create_if_due, reflection_state
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
