from __future__ import annotations

import time

import pytest

from ledger.models import Event, Role
from ledger.projections import projection_rebuild, registered_projections
from ledger.services import EventDraft, events_append
from memory.embeddings.backends import EmbeddingUnavailable
from memory.embeddings.services import event_embeddings_build
from memory.models import EventEmbedding


def index_projection():
    return next(p for p in registered_projections() if p.name == "event_embeddings")


@pytest.mark.django_db
def test_building_the_index_twice_adds_each_event_once(tenant, embedding_standin):
    events = events_append(
        tenant=tenant,
        drafts=[
            EventDraft(kind="world.observed", actor="system", payload={"text": "rain"}),
            EventDraft(kind="world.observed", actor="system", payload={"secret": "no text"}),
        ],
    )
    ids = [e.pk for e in events]

    first = event_embeddings_build(event_ids=ids)
    second = event_embeddings_build(event_ids=ids)

    assert (first, second) == (1, 0)
    assert list(EventEmbedding.objects.values_list("event_id", "model")) == [
        (events[0].pk, "openai:standin-embed:16")
    ]
    # Only displayable text is ever sent to the embedder.
    assert embedding_standin.requests[0]["body"]["input"] == ["rain"]


@pytest.mark.django_db
def test_an_unavailable_embedder_raises_for_a_retry_and_writes_nothing(tenant, no_embedder):
    event = events_append(
        tenant=tenant, drafts=[EventDraft(kind="x.y", actor="system", payload={"text": "t"})]
    )[0]

    with pytest.raises(EmbeddingUnavailable):
        event_embeddings_build(event_ids=[event.pk])

    assert not EventEmbedding.objects.exists()


@pytest.mark.django_db
def test_the_rebuild_command_refills_a_dropped_index(tenant, embedding_standin):
    events = events_append(
        tenant=tenant,
        drafts=[
            EventDraft(kind="x.y", actor="system", payload={"text": f"t{i}"}) for i in range(3)
        ],
    )
    event_embeddings_build(event_ids=[e.pk for e in events])
    EventEmbedding.objects.filter(event=events[1]).delete()

    unchanged = projection_rebuild(projection=index_projection(), tenant=tenant)

    assert unchanged is False
    assert EventEmbedding.objects.filter(tenant=tenant).count() == 3


@pytest.mark.django_db(transaction=True)
def test_appended_events_are_indexed_by_the_worker_after_commit(
    tenant, make_agent, api_as, embedding_standin, celery_worker
):
    make_agent(tenant, name="Creator1")
    client = api_as(tenant, role=Role.AGENT)

    response = client.post(
        "/api/v1/events/",
        {"kind": "agent.spoke", "actor": "Creator1", "payload": {"text": "the vault is open"}},
        format="json",
    )

    event = Event.objects.get(tenant=tenant, seq=response.json()["seq"])
    deadline = time.monotonic() + 15
    while not EventEmbedding.objects.filter(event=event).exists():
        assert time.monotonic() < deadline, "the worker did not index the event"
        time.sleep(0.05)
