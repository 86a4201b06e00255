"""Facts that supersede each other (issue 22): validity intervals, explicit and found
supersession, as_of and include_superseded, the ledger and its replay."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ledger.models import Event, Role
from ledger.projections import projection_rebuild, registered_projections
from memory.embeddings.backends import embed_texts
from memory.episodic.services import MemoryDraft, memories_store
from memory.episodic.validity import CURRENTLY_VALID, Validity
from memory.models import Memory
from memory.search.selectors import memories_search
from tests.standins import openai_standin

pytestmark = pytest.mark.django_db

MAY = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
JUNE = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
EUR = "I prefer invoices in EUR."
GBP = "Now I prefer GBP for invoices."
MEETINGS = "I prefer meetings in the morning."


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Ledgerly")


@pytest.fixture
def client(tenant, agent, api_as):
    return api_as(tenant, role=Role.AGENT, agent=agent)


def store(agent, content, when, **fields):
    return memories_store(
        agent=agent, drafts=[MemoryDraft(content=content, occurred_at=when, **fields)], actor="x"
    )[0]


def found(agent, query, validity=CURRENTLY_VALID):
    hits = memories_search(
        agent=agent,
        query=query,
        sources=("agent_memory",),
        top_k=10,
        validity=validity,
        record_retrieval=False,
    ).hits
    return [hit.content for hit in hits]


def test_a_memory_that_supersedes_another_ends_its_validity(agent, settings):
    settings.CONSOLIDATION_MODE = "off"
    eur = store(agent, EUR, MAY)
    gbp = store(agent, GBP, JUNE, supersedes=(eur.pk,))

    eur.refresh_from_db()
    assert (eur.valid_from, eur.valid_until, eur.superseded_by) == (MAY, JUNE, gbp.pk)
    assert (gbp.valid_from, gbp.valid_until) == (JUNE, None)
    assert gbp.consolidation is not None
    assert gbp.consolidation.supersedes == [eur.pk]
    event = Event.objects.get(kind="memory.superseded")
    assert event.payload["memory_id"] == eur.pk
    assert event.payload["superseded_by"] == gbp.pk
    assert event.payload["reason"] == "explicit"
    assert "EUR" not in str(event.payload)


def test_search_leaves_superseded_memories_out_and_finds_them_as_of_then(agent, settings):
    settings.CONSOLIDATION_MODE = "off"
    eur = store(agent, EUR, MAY)
    store(agent, GBP, JUNE, supersedes=(eur.pk,))

    assert found(agent, "which currency for invoices?") == [GBP]
    everything = found(
        agent, "which currency for invoices?", validity=Validity(include_superseded=True)
    )
    assert sorted(everything) == sorted([EUR, GBP])
    in_may = found(
        agent, "which currency for invoices?", validity=Validity(as_of=MAY + timedelta(days=3))
    )
    assert in_may == [EUR]
    assert found(agent, "invoices", validity=Validity(as_of=MAY - timedelta(days=1))) == []


def test_the_api_stores_with_supersedes_and_lists_by_validity(client, agent, settings):
    settings.CONSOLIDATION_MODE = "off"
    eur = client.post(
        "/api/v1/memories/", {"content": EUR, "occurred_at": MAY.isoformat()}, format="json"
    ).json()
    gbp = client.post(
        "/api/v1/memories/",
        {"content": GBP, "occurred_at": JUNE.isoformat(), "supersedes": [eur["id"]]},
        format="json",
    )

    assert gbp.status_code == 201, gbp.content
    body = gbp.json()
    assert body["supersedes"] == [eur["id"]]
    assert body["supersession_candidates"][0]["reason"] == "explicit"
    assert body["supersession_candidates"][0]["applied"] is True
    listed = [m["content"] for m in client.get("/api/v1/memories/").json()["results"]]
    assert listed == [GBP]
    every = client.get("/api/v1/memories/?include_superseded=true").json()["results"]
    assert [(m["content"], m["superseded_by"]) for m in every] == [(GBP, None), (EUR, body["id"])]
    then = client.get("/api/v1/memories/", {"as_of": "2026-05-15T00:00:00Z"}).json()["results"]
    assert [m["content"] for m in then] == [EUR]
    # A superseded memory is still there to read by its id.
    old = client.get(f"/api/v1/memories/{eur['id']}/").json()
    assert old["valid_until"] == "2026-06-01T09:00:00Z"
    searched = client.post(
        "/api/v1/memories/search/",
        {"query": "invoice currency", "sources": ["agent_memory"], "as_of": "2026-05-15T00:00:00Z"},
        format="json",
    ).json()["results"]
    assert [hit["content"] for hit in searched] == [EUR]


def test_a_memory_supersedes_others_after_the_fact(client, agent, settings):
    settings.CONSOLIDATION_MODE = "off"
    eur = store(agent, EUR, MAY)
    gbp = store(agent, GBP, JUNE)

    answer = client.post(
        f"/api/v1/memories/{gbp.pk}/supersede/", {"supersedes": [eur.pk]}, format="json"
    )

    assert answer.status_code == 200, answer.content
    assert answer.json()["supersedes"] == [eur.pk]
    assert Memory.objects.get(pk=eur.pk).superseded_by == gbp.pk
    again = client.post(
        f"/api/v1/memories/{gbp.pk}/supersede/", {"supersedes": [eur.pk]}, format="json"
    )
    assert again.status_code == 400
    assert again.json()["error"]["code"] == "invalid_supersedes"
    itself = client.post(
        f"/api/v1/memories/{gbp.pk}/supersede/", {"supersedes": [gbp.pk]}, format="json"
    )
    assert itself.json()["error"]["code"] == "invalid_supersedes"
    history = client.get(f"/api/v1/memories/{eur.pk}/history/").json()["results"]
    assert [entry["kind"] for entry in history] == ["memory.stored", "memory.superseded"]


def test_another_agents_memory_cannot_be_superseded(client, tenant, make_agent, settings):
    settings.CONSOLIDATION_MODE = "off"
    theirs = store(make_agent(tenant, name="Other"), EUR, MAY)

    answer = client.post(
        "/api/v1/memories/", {"content": GBP, "supersedes": [theirs.pk, 999999]}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "unknown_memory"
    assert answer.json()["error"]["details"]["unknown"] == [theirs.pk, 999999]
    assert not Memory.objects.filter(content=GBP).exists()
    assert Memory.objects.get(pk=theirs.pk).valid_until is None


def test_as_of_and_include_superseded_together_are_refused(client):
    listed = client.get("/api/v1/memories/?include_superseded=true&as_of=2026-05-01T00:00:00Z")
    searched = client.post(
        "/api/v1/memories/search/",
        {"query": "x", "include_superseded": True, "as_of": "2026-05-01T00:00:00Z"},
        format="json",
    )
    bad_moment = client.get("/api/v1/memories/?as_of=yesterday")

    assert listed.json()["error"]["code"] == "invalid_parameter"
    assert searched.json()["error"]["code"] == "invalid_parameter"
    assert bad_moment.json()["error"]["code"] == "invalid_parameter"


def test_the_rule_proposes_without_changing_anything_by_default(client, agent):
    store(agent, EUR, MAY)
    store(agent, MEETINGS, MAY)

    body = client.post("/api/v1/memories/", {"content": GBP}, format="json").json()

    assert body["consolidation"]["mode"] == "propose"
    assert body["consolidation"]["decision"] == "supersede"
    assert body["consolidation"]["decided_by"] == "rule"
    assert [(c["content"], c["applied"]) for c in body["supersession_candidates"]] == [(EUR, False)]
    assert body["supersedes"] == []
    assert not Event.objects.filter(kind="memory.superseded").exists()
    assert Memory.objects.filter(valid_until__isnull=False).count() == 0


def test_under_apply_the_rule_supersedes_and_logs_it(agent, settings):
    settings.CONSOLIDATION_MODE = "apply"
    eur = store(agent, EUR, MAY)
    meetings = store(agent, MEETINGS, MAY)

    gbp = store(agent, GBP, JUNE)

    assert gbp.consolidation is not None
    assert gbp.consolidation.supersedes == [eur.pk]
    event = Event.objects.get(kind="memory.superseded")
    assert event.payload["reason"].startswith("rule: ")
    assert Memory.objects.get(pk=meetings.pk).valid_until is None
    assert found(agent, "invoices currency") == [GBP]


def test_a_restatement_is_stored_and_supersedes_nothing(agent, settings):
    settings.CONSOLIDATION_MODE = "apply"
    store(agent, EUR, MAY)

    again = store(agent, "I prefer invoices in EUR", JUNE)

    assert again.consolidation is not None
    assert again.consolidation.decision == "ignore"
    assert again.consolidation.supersedes == []
    assert Memory.objects.count() == 2


def test_an_older_fact_never_supersedes_a_newer_one(agent, settings):
    settings.CONSOLIDATION_MODE = "apply"
    store(agent, GBP, JUNE)

    backdated = store(agent, EUR, MAY)

    assert backdated.consolidation is not None
    assert backdated.consolidation.candidates == ()


def test_off_looks_for_nothing(agent, settings):
    settings.CONSOLIDATION_MODE = "off"
    store(agent, EUR, MAY)

    gbp = store(agent, GBP, JUNE)

    assert gbp.consolidation is not None
    assert (gbp.consolidation.decided_by, gbp.consolidation.candidates) == ("", ())


def test_working_memory_leaves_superseded_memories_out(client, agent, settings):
    settings.CONSOLIDATION_MODE = "off"
    eur = store(agent, EUR, MAY)
    store(agent, GBP, JUNE, supersedes=(eur.pk,))

    answer = client.post(
        "/api/v1/context/",
        {"token_budget": 10_000, "query": "Which currency should the invoice use?", "turns": []},
        format="json",
    )

    assert answer.status_code == 200, answer.content
    text = str(answer.json())
    assert GBP in text
    assert EUR not in text


def test_the_rebuild_replays_validity_intervals(tenant, agent, settings):
    settings.CONSOLIDATION_MODE = "apply"
    eur = store(agent, EUR, MAY)
    gbp = store(agent, GBP, JUNE)
    Memory.objects.filter(pk=eur.pk).update(valid_until=None, superseded_by=None, valid_from=JUNE)
    projection = next(p for p in registered_projections() if p.name == "memories")

    unchanged = projection_rebuild(projection=projection, tenant=tenant)

    assert unchanged is False
    eur.refresh_from_db()
    assert (eur.valid_from, eur.valid_until, eur.superseded_by) == (MAY, JUNE, gbp.pk)
    assert projection_rebuild(projection=projection, tenant=tenant) is True


@pytest.fixture
def chat_model(settings):
    """The consolidation model pointed at a local OpenAI-compatible stand-in."""
    with openai_standin() as standin:
        settings.CONSOLIDATION_LLM_URL = standin.url
        settings.CONSOLIDATION_LLM_MODEL = "standin-chat"
        settings.CONSOLIDATION_LLM_API_KEY = "chat-key"
        settings.CONSOLIDATION_LLM_TIMEOUT_SECONDS = 1.0
        settings.CONSOLIDATION_MODE = "apply"
        yield standin


def decision(*entries):
    return json.dumps({"memory": [dict(zip(("id", "event"), e, strict=True)) for e in entries]})


def test_the_model_decides_what_a_new_memory_supersedes(agent, chat_model):
    eur = store(agent, EUR, MAY)
    store(agent, MEETINGS, MAY)

    def reply(body):
        shown = json.loads(body["messages"][1]["content"].split("\n")[1])
        index = next(e["id"] for e in shown if e["text"] == EUR)
        return decision((index, "UPDATE"), ("new", "ADD"))

    chat_model.chat_reply_of = reply
    gbp = store(agent, GBP, JUNE)

    assert gbp.consolidation is not None
    assert gbp.consolidation.decided_by == "model"
    assert gbp.consolidation.supersedes == [eur.pk]
    assert Event.objects.get(kind="memory.superseded").payload["reason"] == "model: UPDATE"
    request = chat_model.requests[-1]
    assert request["auth"] == "Bearer chat-key"
    assert request["body"]["model"] == "standin-chat"
    assert GBP in request["body"]["messages"][1]["content"]


def test_the_model_may_find_a_memory_repeats_one(agent, chat_model):
    store(agent, EUR, MAY)
    chat_model.chat_reply = decision(("0", "NONE"), ("new", "NONE"))

    again = store(agent, "Invoices: EUR, as I said.", JUNE)

    assert again.consolidation is not None
    assert (again.consolidation.decision, again.consolidation.decided_by) == ("ignore", "model")
    assert Memory.objects.filter(pk=again.pk).exists()


@pytest.mark.parametrize(
    "failure",
    ["not json at all", '{"memory": [{"id": "0", "event": "MERGE"}]}', "slow", "http 500"],
)
def test_a_failing_model_falls_back_to_the_rule_and_keeps_the_write(agent, chat_model, failure):
    eur = store(agent, EUR, MAY)
    if failure == "slow":
        chat_model.chat_delay = 1.5
    elif failure == "http 500":
        chat_model.fail_with = 500
    else:
        chat_model.chat_reply = failure

    gbp = store(agent, GBP, JUNE)

    assert gbp.consolidation is not None
    assert gbp.consolidation.decided_by == "rule"
    assert gbp.consolidation.model_error
    assert gbp.consolidation.supersedes == [eur.pk]
    assert Memory.objects.filter(pk=gbp.pk).exists()


def test_the_model_is_not_asked_when_nothing_is_near(agent, chat_model):
    store(agent, EUR, MAY)

    store(agent, "The staging VPN password rotates every Monday.", JUNE)

    assert chat_model.requests == []


def test_a_batch_is_judged_by_the_rule_not_the_model(agent, chat_model):
    store(agent, EUR, MAY)

    memories_store(
        agent=agent,
        drafts=[MemoryDraft(content=GBP, occurred_at=JUNE), MemoryDraft(content=MEETINGS)],
        actor="x",
        defer_consolidation=False,
    )

    assert chat_model.requests == []
    assert Memory.objects.get(content=EUR).valid_until == JUNE


@pytest.mark.parametrize(
    ("stored_cosine", "speaker", "embedded_again"),
    [
        (0.20, "user", False),  # same frame: the content cannot come near the threshold
        (0.58, "user", True),  # within the margin: the content might reach it
        (0.20, "assistant", True),  # another speaker's frame says nothing about the content
    ],
)
def test_neighbours_that_cannot_reach_the_threshold_are_not_embedded_again(
    monkeypatch, settings, stored_cosine, speaker, embedded_again
):
    from memory.consolidation import services as consolidation

    settings.CONSOLIDATION_SIMILARITY_THRESHOLD = 0.6
    embedded: list[list[str]] = []

    def recorded(texts: list[str]) -> list[list[float]]:
        embedded.append(list(texts))
        return embed_texts(texts)

    monkeypatch.setattr(consolidation, "embed_texts", recorded)
    new = Memory(content=GBP, role="user", metadata={})
    neighbour = consolidation._Neighbour(1, EUR, stored_cosine, speaker)

    consolidation._rule_plan(new, [neighbour], "propose")

    assert embedded == ([[GBP, EUR]] if embedded_again else [])


@pytest.fixture
def embedded(monkeypatch):
    """Every text consolidation sends to the embedder, one list per call."""
    from memory.consolidation import services as consolidation

    calls: list[list[str]] = []

    def recorded(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return embed_texts(texts)

    monkeypatch.setattr(consolidation, "embed_texts", recorded)
    return calls


def test_content_vectors_are_kept_so_a_neighbour_is_embedded_once(agent, embedded):
    from memory.models import MemoryContentEmbedding

    eur = store(agent, EUR, MAY)
    gbp = store(agent, GBP, JUNE)
    assert embedded == [[GBP, EUR]]
    assert set(MemoryContentEmbedding.objects.values_list("memory_id", flat=True)) == {
        eur.pk,
        gbp.pk,
    }

    chf = store(agent, "Now I prefer CHF for invoices.", JUNE + timedelta(days=1))

    # Both older facts come from their kept vectors; only the new content is embedded.
    assert embedded[1] == [chf.content]
    assert chf.consolidation is not None
    assert {c.id for c in chf.consolidation.candidates} >= {gbp.pk}
    by_id = {c.id: c.similarity for c in chf.consolidation.candidates}
    fresh = embed_texts([chf.content, GBP])
    assert by_id[gbp.pk] == pytest.approx(sum(a * b for a, b in zip(*fresh, strict=True)), abs=1e-3)


def test_a_kept_vector_of_content_that_changed_is_not_used(agent, embedded):
    from memory.episodic.services import memory_update
    from memory.models import MemoryContentEmbedding

    eur = store(agent, EUR, MAY)
    store(agent, GBP, JUNE)
    memory_update(memory=eur, actor="x", changes={"content": "I prefer invoices in USD."})

    store(agent, "Now I prefer CHF for invoices.", JUNE + timedelta(days=1))

    assert "I prefer invoices in USD." in embedded[-1]
    kept = MemoryContentEmbedding.objects.get(memory_id=eur.pk)
    assert kept.content_hash == Memory.objects.get(pk=eur.pk).content_hash


def test_a_deleted_memory_takes_its_content_vector_with_it(agent, embedded):
    from memory.episodic.services import memory_delete
    from memory.models import MemoryContentEmbedding

    eur = store(agent, EUR, MAY)
    store(agent, GBP, JUNE)
    assert MemoryContentEmbedding.objects.filter(memory_id=eur.pk).exists()

    memory_delete(memory=eur, actor="x")

    assert not MemoryContentEmbedding.objects.filter(memory_id=eur.pk).exists()


def test_a_batch_judged_later_keeps_its_content_vectors(agent, embedded, settings):
    from memory.consolidation.services import memories_consolidate
    from memory.models import MemoryContentEmbedding

    eur = store(agent, EUR, MAY)
    batch = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(content=GBP, occurred_at=JUNE),
            MemoryDraft(content=MEETINGS, occurred_at=JUNE),
        ],
        actor="x",
        defer_consolidation=True,
    )

    memories_consolidate(memory_ids=[m.pk for m in batch], actor="x")
    memories_consolidate(memory_ids=[m.pk for m in batch], actor="x")

    assert MemoryContentEmbedding.objects.filter(memory_id__in=[eur.pk, batch[0].pk]).count() == 2
    # The second judgement read every vector it needed.
    assert len(embedded) == 1


def test_a_vector_kept_for_a_memory_deleted_meanwhile_is_dropped_quietly(agent):
    from memory.consolidation.services import content_embeddings_keep
    from memory.models import MemoryContentEmbedding

    eur = store(agent, EUR, MAY)
    vector = embed_texts([EUR])[0]

    content_embeddings_keep(
        {eur.pk: (agent.tenant_id, EUR, vector), eur.pk + 1000: (agent.tenant_id, GBP, vector)},
        model="m",
    )

    assert not MemoryContentEmbedding.objects.exists()  # the batch's savepoint, nothing else
    assert Memory.objects.filter(pk=eur.pk).exists()
