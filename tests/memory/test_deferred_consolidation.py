"""A batch's consolidation judged after its store (``memories_consolidate``): the same findings
as inline, batch-mates included, none of the store's time; under propose a recorded proposal."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from ledger.models import Event, Role
from ledger.projections import projection_rebuild, registered_projections
from memory.consolidation.services import PROPOSED, SUPERSEDED, memories_consolidate
from memory.episodic.services import MemoryDraft, memories_store
from memory.models import Memory
from tests.memory.test_supersession import EUR, GBP, JUNE, MAY, MEETINGS


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Ledgerly")


def batch(agent, *drafts: tuple[str, datetime], defer: bool | None = None) -> list[Memory]:
    return memories_store(
        agent=agent,
        drafts=[MemoryDraft(content=content, occurred_at=when) for content, when in drafts],
        actor="agent:Ledgerly",
        defer_consolidation=defer,
    )


def valid_until(content: str) -> datetime | None:
    return Memory.objects.get(content=content).valid_until


@pytest.mark.django_db
def test_a_deferred_batch_is_stored_untouched_and_judged_afterwards(agent, settings, tenant):
    settings.CONSOLIDATION_MODE = "apply"
    batch(agent, (EUR, MAY), (MEETINGS, MAY), defer=False)

    stored = batch(agent, (GBP, JUNE), ("Lunch is at noon.", JUNE))

    assert [m.consolidation.decision for m in stored] == ["deferred", "deferred"]
    assert valid_until(EUR) is None
    assert not Event.objects.filter(kind=SUPERSEDED).exists()

    written = memories_consolidate(memory_ids=[m.pk for m in stored], actor="agent:Ledgerly")

    assert written == 1
    assert valid_until(EUR) == JUNE
    assert valid_until(MEETINGS) is None
    event = Event.objects.get(kind=SUPERSEDED)
    assert (event.actor, event.payload["superseded_by"]) == ("agent:Ledgerly", stored[0].pk)
    assert event.payload["reason"].startswith("rule: ")
    # Judged again (a retried task): nothing more is written.
    assert memories_consolidate(memory_ids=[m.pk for m in stored], actor="x") == 0
    projection = next(p for p in registered_projections() if p.name == "memories")
    assert projection_rebuild(projection=projection, tenant=tenant) is True


@pytest.mark.django_db
def test_a_batch_mate_is_a_neighbour_and_the_later_one_wins(agent, settings):
    """Inline, a batch's memories never see each other; deferred, the later one supersedes."""
    settings.CONSOLIDATION_MODE = "apply"

    stored = batch(agent, (GBP, JUNE), (EUR, MAY))
    memories_consolidate(memory_ids=[m.pk for m in stored], actor="x")

    assert valid_until(EUR) == JUNE
    assert valid_until(GBP) is None


@pytest.mark.django_db
def test_of_two_memories_of_the_same_time_the_one_stored_first_never_supersedes(agent, settings):
    settings.CONSOLIDATION_MODE = "apply"

    stored = batch(agent, (EUR, JUNE), (GBP, JUNE))
    memories_consolidate(memory_ids=[m.pk for m in stored], actor="x")

    eur, gbp = (Memory.objects.get(pk=m.pk) for m in stored)
    assert gbp.valid_until is None
    assert eur.superseded_by == gbp.pk


@pytest.mark.django_db
def test_under_propose_the_finding_is_recorded_in_the_memorys_history(agent, tenant, api_as):
    batch(agent, (EUR, MAY), (MEETINGS, MAY), defer=False)
    stored = batch(agent, (GBP, JUNE), ("The staging VPN password rotates weekly.", JUNE))

    assert memories_consolidate(memory_ids=[m.pk for m in stored], actor="x") == 1

    assert valid_until(EUR) is None
    eur = Memory.objects.get(content=EUR)
    event = Event.objects.get(kind=PROPOSED)
    assert event.payload["memory_id"] == stored[0].pk
    assert [c["memory_id"] for c in event.payload["candidates"]] == [eur.pk]
    assert "EUR" not in str(event.payload)
    client = api_as(tenant, role=Role.AGENT, agent=agent)
    history = client.get(f"/api/v1/memories/{stored[0].pk}/history/").json()["results"]
    assert [entry["kind"] for entry in history] == ["memory.stored", PROPOSED]
    assert history[1]["reason"].startswith(f"would supersede memory {eur.pk} (rule: ")
    assert history[1]["changed"] == []


@pytest.mark.django_db
def test_off_defers_nothing_and_a_deleted_memory_is_skipped(agent, settings):
    settings.CONSOLIDATION_MODE = "apply"
    batch(agent, (EUR, MAY), defer=False)
    stored = batch(agent, (GBP, JUNE), (MEETINGS, JUNE))
    Memory.objects.filter(pk=stored[0].pk).delete()

    assert memories_consolidate(memory_ids=[m.pk for m in stored], actor="x") == 0
    settings.CONSOLIDATION_MODE = "off"
    assert [m.consolidation.decision for m in batch(agent, (GBP, JUNE), (MEETINGS, JUNE))] == [
        "add",
        "add",
    ]


@pytest.mark.django_db
def test_the_api_defers_batches_unless_asked_and_applies_explicit_ids_now(
    agent, tenant, api_as, settings
):
    settings.CONSOLIDATION_MODE = "apply"
    eur = batch(agent, (EUR, MAY), defer=False)[0]
    client = api_as(tenant, role=Role.AGENT, agent=agent)

    def post(memories, **fields):
        answer = client.post(
            "/api/v1/memories/batch/", {"memories": memories, **fields}, format="json"
        )
        assert answer.status_code == 201, answer.content
        return [m["consolidation"]["decision"] for m in answer.json()["memories"]]

    assert post([{"content": MEETINGS}, {"content": "Lunch is at noon."}]) == ["deferred"] * 2
    assert post([{"content": "Standups are at ten."}]) == ["add"]  # one memory: judged now
    assert post(
        [{"content": "Reports go out on Fridays."}, {"content": "Now I prefer USD for invoices."}],
        defer_consolidation=False,
    ) == ["add", "supersede"]
    eur.refresh_from_db()
    assert eur.superseded_by is not None  # judged inline
    explicit = client.post(
        "/api/v1/memories/batch/",
        {
            "memories": [
                {"content": "Invoices in CHF from now on.", "supersedes": [eur.superseded_by]},
                {"content": "Tea, not coffee."},
            ]
        },
        format="json",
    ).json()["memories"]
    assert explicit[0]["supersedes"] == [eur.superseded_by]
    assert explicit[0]["consolidation"]["decided_by"] == "explicit"
    settings.CONSOLIDATION_DEFER_BATCHES = False
    assert post([{"content": "Demos on Thursdays."}, {"content": "Tea at four."}]) == ["add"] * 2
    refused = client.post(
        "/api/v1/memories/batch/",
        {"memories": [{"content": "x"}], "defer_consolidation": "sometimes"},
        format="json",
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "validation_error"


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_the_worker_judges_a_batch_the_api_stored(
    celery_worker, tenant, make_agent, api_as, settings
):
    settings.CONSOLIDATION_MODE = "apply"
    agent = make_agent(tenant, name="Deferrer")
    client = api_as(tenant, role=Role.AGENT, agent=agent)
    first = client.post(
        "/api/v1/memories/", {"content": EUR, "occurred_at": MAY.isoformat()}, format="json"
    )
    assert first.status_code == 201, first.content

    answer = client.post(
        "/api/v1/memories/batch/",
        {"memories": [{"content": GBP, "occurred_at": JUNE.isoformat()}, {"content": MEETINGS}]},
        format="json",
    )

    assert answer.status_code == 201, answer.content
    successor = answer.json()["memories"][0]["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and valid_until(EUR) is None:
        time.sleep(0.2)
    eur = Memory.objects.get(content=EUR)
    assert (eur.valid_until, eur.superseded_by) == (JUNE, successor)


@pytest.mark.django_db
def test_a_batchs_contents_are_embedded_again_in_one_call(agent, settings, monkeypatch):
    from memory.consolidation import services as consolidation

    settings.CONSOLIDATION_MODE = "apply"
    batch(agent, (EUR, MAY), (MEETINGS, MAY), defer=False)
    stored = batch(
        agent, (GBP, JUNE), ("Now I prefer meetings in the afternoon.", JUNE), ("Hi!", JUNE)
    )
    calls: list[list[str]] = []
    from memory.embeddings.backends import embed_texts as embed

    def recorded(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return embed(texts)

    monkeypatch.setattr(consolidation, "embed_texts", recorded)

    assert memories_consolidate(memory_ids=[m.pk for m in stored], actor="x") == 2

    assert len(calls) == 1
    assert {EUR, GBP, MEETINGS} <= set(calls[0])
    assert len(calls[0]) == len(set(calls[0]))
    assert valid_until(EUR) == valid_until(MEETINGS) == JUNE


@pytest.mark.django_db
def test_newer_memories_never_crowd_the_older_neighbours_out(agent, settings):
    settings.CONSOLIDATION_MODE = "apply"
    settings.CONSOLIDATION_NEIGHBOURS = 1
    batch(agent, (EUR, MAY), defer=False)
    july = datetime(2026, 7, 1, 9, 0, tzinfo=JUNE.tzinfo)
    gbp, _ = batch(agent, (GBP, JUNE), ("Now I prefer GBP for invoices!", july))

    memories_consolidate(memory_ids=[gbp.pk], actor="x")  # the July one, nearer, is newer

    assert Memory.objects.get(content=EUR).superseded_by == gbp.pk
