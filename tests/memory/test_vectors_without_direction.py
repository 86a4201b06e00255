"""Vectors without a direction (all zeros, or too small or large for float32) never enter, and a
stored one breaks no search.

Issue 18, item 6: an all-zero embedding was accepted on POST /api/v1/memories/, and from then on
that agent's search, POST /api/v1/context/ and the memory explorer answered 500 (pgvector's cosine
distance to a zero vector is NaN, and NaN is no JSON) until the memory was deleted; an all-zero
query vector alone gave 500.
"""

from __future__ import annotations

import importlib
import math

import pytest
from django.db import connection

from ledger.models import Event
from ledger.services import event_append
from memory.embeddings.backends import EmbeddingUnavailable, embed_texts, embedder_name, unit_vector
from memory.embeddings.local_embedder import DIMENSIONS
from memory.episodic.services import MemoryDraft, memories_store, memory_embeddings_backfill
from memory.knowledge.services import DocumentFields, knowledge_document_create
from memory.models import EventEmbedding, KnowledgeChunk, Memory
from trust.models import DissentEmbedding
from trust.rounds.services import dissent_log

pytestmark = pytest.mark.django_db

ZEROS = [0.0] * DIMENSIONS
# Not zero in float64, but each square underflows float32 (pgvector's arithmetic) to zero.
UNDERFLOWING = [1e-30] * DIMENSIONS
# Each square overflows float32.
OVERFLOWING = [1e30] * DIMENSIONS


@pytest.fixture
def alpha(tenant, make_agent):
    return make_agent(tenant, name="alpha")


def test_an_all_zero_embedding_is_refused_and_nothing_is_stored(api_as, tenant, alpha):
    client = api_as(tenant)
    events = Event.objects.count()

    single = client.post(
        "/api/v1/memories/",
        {"agent": "alpha", "content": "hello", "embedding": ZEROS},
        format="json",
    )
    batch = client.post(
        "/api/v1/memories/batch/",
        {"agent": "alpha", "memories": [{"content": "a"}, {"content": "b", "embedding": ZEROS}]},
        format="json",
    )

    assert (single.status_code, single.json()["error"]["code"]) == (400, "invalid_embedding")
    assert (batch.status_code, batch.json()["error"]["details"]) == (400, {"index": 1})
    assert not Memory.objects.filter(tenant=tenant).exists()
    assert Event.objects.count() == events


def test_an_all_zero_query_vector_is_refused(api_as, tenant, alpha):
    response = api_as(tenant).post(
        "/api/v1/memories/search/",
        {"agent": "alpha", "query": "hello", "embedding": ZEROS},
        format="json",
    )

    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_embedding")


@pytest.mark.parametrize("vector", [UNDERFLOWING, OVERFLOWING], ids=["underflowing", "overflowing"])
def test_a_vector_float32_cannot_measure_is_stored_as_its_direction_and_found(
    api_as, tenant, alpha, vector
):
    client = api_as(tenant)

    stored = client.post(
        "/api/v1/memories/",
        {"agent": "alpha", "content": "the key is under the mat", "embedding": vector},
        format="json",
    )
    found = client.post(
        "/api/v1/memories/search/",
        {"agent": "alpha", "query": "key", "embedding": vector},
        format="json",
    )

    assert stored.status_code == 201, stored.content
    norm = math.sqrt(sum(v * v for v in Memory.objects.get().embedding))
    assert norm == pytest.approx(1.0, abs=1e-5)
    assert found.status_code == 200, found.content
    assert found.json()["results"][0]["breakdown"]["cosine"] == pytest.approx(1.0, abs=1e-5)


def _stored_from_an_older_install(tenant, alpha) -> Memory:
    """A memory whose vector is all zeros, as POST /memories/ stored them before."""
    memory = memories_store(
        agent=alpha, drafts=[MemoryDraft(content="the deploy key is in the vault")], actor="t"
    )[0]
    Memory.objects.filter(pk=memory.pk).update(embedding=ZEROS)
    return memory


def test_a_stored_zero_vector_breaks_no_search_of_its_agent(api_as, tenant, alpha, reviewer_client):
    memory = _stored_from_an_older_install(tenant, alpha)
    client = api_as(tenant)

    search = client.post(
        "/api/v1/memories/search/", {"agent": "alpha", "query": "deploy key"}, format="json"
    )
    context = client.post(
        "/api/v1/context/",
        {"agent": "alpha", "query": "deploy key", "token_budget": 2000},
        format="json",
    )
    explorer = reviewer_client.get("/memory/", {"agent": alpha.pk, "q": "deploy key"})

    assert search.status_code == 200, search.content
    assert [(r["id"], r["breakdown"]["cosine"]) for r in search.json()["results"]] == [
        (memory.pk, 0.0)  # found by its words, as a memory without a vector is
    ]
    assert context.status_code == 200, context.content
    assert explorer.status_code == 200


def test_a_stored_zero_vector_breaks_no_recall_knowledge_search_or_novelty(api_as, tenant, alpha):
    event = event_append(
        tenant=tenant, kind="agent.spoke", actor="alpha", run_id="r", payload={"text": "deploy"}
    )
    EventEmbedding.objects.create(
        event=event, tenant=tenant, run_id="r", embedding=ZEROS, model=embedder_name()
    )
    knowledge_document_create(
        tenant=tenant,
        fields=DocumentFields(title="Deploys", body="How to deploy."),
        actor="t",
        publish=True,
    )
    KnowledgeChunk.objects.filter(tenant=tenant).update(embedding=ZEROS)
    first = dissent_log(agent=alpha, text="We should not deploy on Fridays.", actor="t")
    DissentEmbedding.objects.filter(dissent_id=first.pk).update(embedding=ZEROS)
    client = api_as(tenant)

    recall = client.post(
        "/api/v1/recall/",
        {"agent": "alpha", "run_id": "r", "mode": "salience", "query": "deploy"},
        format="json",
    )
    knowledge = client.post("/api/v1/kb/search/", {"query": "deploy"}, format="json")
    second = dissent_log(agent=alpha, text="Fridays are fine for deploys.", actor="t")

    assert recall.status_code == 200, recall.content
    assert knowledge.status_code == 200, knowledge.content
    assert knowledge.json()["results"]
    assert math.isfinite(second.depth_score)


def _forget_directionless_vectors() -> None:
    """What migrations memory 0014 and trust 0003 run on an install that holds such vectors."""
    for name in (
        "memory.migrations.0014_vectors_without_direction",
        "trust.migrations.0003_dissent_vectors_without_direction",
    ):
        for operation in importlib.import_module(name).Migration.operations:
            statements = operation.sql if isinstance(operation.sql, list) else [operation.sql]
            with connection.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)


def test_the_migration_forgets_directionless_vectors_and_the_backfill_embeds_again(tenant, alpha):
    zero = _stored_from_an_older_install(tenant, alpha)
    tiny = memories_store(agent=alpha, drafts=[MemoryDraft(content="tiny")], actor="t")[0]
    Memory.objects.filter(pk=tiny.pk).update(embedding=UNDERFLOWING)
    fine = memories_store(agent=alpha, drafts=[MemoryDraft(content="fine")], actor="t")[0]
    event = event_append(tenant=tenant, kind="agent.spoke", actor="alpha", payload={"text": "x"})
    EventEmbedding.objects.create(event=event, tenant=tenant, embedding=ZEROS, model="m")
    dissent = dissent_log(agent=alpha, text="No.", actor="t")
    DissentEmbedding.objects.filter(dissent_id=dissent.pk).update(embedding=ZEROS)

    _forget_directionless_vectors()

    vectors = dict(Memory.objects.values_list("pk", "embedding"))
    assert (vectors[zero.pk], vectors[tiny.pk]) == (None, None)
    assert vectors[fine.pk] is not None
    assert not EventEmbedding.objects.filter(event=event).exists()
    assert not DissentEmbedding.objects.filter(dissent_id=dissent.pk).exists()
    assert memory_embeddings_backfill() == 2


@pytest.mark.parametrize(
    "answer",
    [lambda text: [0.0] * 16, lambda text: [math.nan] * 16, lambda text: [math.inf] + [0.0] * 15],
    ids=["zeros", "NaN", "infinity"],
)
def test_an_embedding_endpoint_answering_no_direction_counts_as_unavailable(
    embedding_standin, alpha, answer
):
    embedding_standin.vector_of = answer

    with pytest.raises(EmbeddingUnavailable, match="without a direction"):
        embed_texts(["hello"])
    stored = memories_store(agent=alpha, drafts=[MemoryDraft(content="hello")], actor="t")[0]

    assert Memory.objects.get(pk=stored.pk).embedding is None  # the backfill fills it later


@pytest.mark.parametrize(
    ("values", "unit"),
    [
        ([3.0, 4.0], [0.6, 0.8]),
        ([1e-320, 0.0], [1.0, 0.0]),  # subnormal
        ([1e308, 1e308], [math.sqrt(0.5), math.sqrt(0.5)]),  # its squares overflow float64
        ([0.0, 0.0], None),
        ([1.0, math.nan], None),
        ([], None),
    ],
)
def test_unit_vector_gives_the_direction_or_none(values, unit):
    result = unit_vector(values)

    assert result == (None if unit is None else pytest.approx(unit))
