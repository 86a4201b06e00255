"""The local model: the re-quantized default, the shipped file, and what a change of model does
to the vectors already stored (the backfill job embeds them again)."""

from __future__ import annotations

import io
import math

import pytest
from django.core import checks
from django.core.management import call_command

from config.checks import TAG
from ledger.services import event_append
from memory.embeddings.backends import embedder_name, embedder_reset
from memory.embeddings.local_embedder import (
    MODEL_NAME,
    SHIPPED_MODEL,
    LocalEmbedder,
    requantized,
    shipped_model_file,
)
from memory.episodic.services import MemoryDraft, memories_store
from memory.knowledge.models import KnowledgeChunk
from memory.knowledge.services import DocumentFields, knowledge_document_create
from memory.models import EventEmbedding, Memory
from memory.tasks import embeddings_backfill_task
from trust.rounds.models import DissentEmbedding
from trust.rounds.services import dissent_embeddings_backfill, dissent_log

pytestmark = pytest.mark.django_db

TEXTS = ["Where did Melanie go camping?", "We camped at the beach last summer with the kids."]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture
def local_model(settings):
    """Switch the local backend's model for the test: ``local_model("...")``."""

    def use(model: str) -> None:
        settings.EMBEDDING_BACKEND = "local"
        settings.EMBEDDING_MODEL = model
        embedder_reset()

    yield use
    embedder_reset()


def test_the_default_is_the_requantized_model_and_it_agrees_with_the_shipped_one():
    default, shipped = LocalEmbedder(), LocalEmbedder(model=SHIPPED_MODEL)

    assert (default.name, shipped.name) == (f"local:{MODEL_NAME}", f"local:{SHIPPED_MODEL}")
    fast, slow = default.embed(TEXTS), shipped.embed(TEXTS)
    for a, b in zip(fast, slow, strict=True):
        assert math.isclose(math.sqrt(cosine(a, a)), 1.0, rel_tol=1e-4)
        # Close (docs/embeddings.md: 0.98-1.00 on LoCoMo), but not the same vectors.
        assert 0.97 < cosine(a, b) < 0.99999
    # Still a sentence embedder: the question is nearer its answer than another question is.
    assert cosine(fast[0], fast[1]) > cosine(fast[0], default.embed(["What is 2 + 2?"])[0])


def test_the_requantized_file_is_made_once_and_then_read(tmp_path):
    source = shipped_model_file()

    first = requantized(source, tmp_path)
    made = first.stat().st_mtime_ns
    again = requantized(source, tmp_path)

    assert again == first
    assert again.stat().st_mtime_ns == made
    # Named after the source and the runtime, so an upgrade of either makes it again.
    assert first.name.startswith(MODEL_NAME)
    assert "onnxruntime" in first.name
    assert [p.name for p in tmp_path.glob("*.onnx")] == [first.name]


def test_a_local_model_that_does_not_exist_stops_the_start(local_model):
    local_model("all-mpnet-base-v2")

    errors = [m for m in checks.run_checks(tags=[TAG]) if m.is_serious()]

    assert any("EMBEDDING_MODEL=all-mpnet-base-v2 names no local model" in e.msg for e in errors), (
        errors
    )
    with pytest.raises(ValueError, match="no local model"):
        LocalEmbedder()


def test_after_a_change_of_model_the_backfill_embeds_every_vector_again(
    tenant, make_agent, local_model
):
    local_model(SHIPPED_MODEL)
    agent = make_agent(tenant, name="Planner")
    ours, theirs = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(content=TEXTS[1]),
            # A vector the client sent is the client's: no model of ours made it.
            MemoryDraft(content="with its own vector", embedding=[1.0] + [0.0] * 383),
        ],
        actor="x",
    )
    knowledge_document_create(
        tenant=tenant,
        fields=DocumentFields(title="Camping", body="# Where\n\nThe beach, the mountains."),
        actor="human:alice",
        publish=True,
    )
    event = event_append(
        tenant=tenant, kind="agent.spoke", actor="Planner", payload={"text": TEXTS[0]}
    )
    embeddings_backfill_task.apply()  # the event's vector
    dissent = dissent_log(agent=agent, text="the plan ignores the weather", actor="o")
    old = f"local:{SHIPPED_MODEL}"
    before = Memory.objects.get(pk=ours.pk).embedding
    assert Memory.objects.get(pk=ours.pk).embedding_model == old
    assert set(KnowledgeChunk.objects.values_list("embedding_model", flat=True)) == {old}
    assert EventEmbedding.objects.get(event=event).model == old
    assert DissentEmbedding.objects.get(dissent_id=dissent.pk).model == old

    local_model("")  # the default
    new = embedder_name()
    embeddings_backfill_task.apply()
    redone = dissent_embeddings_backfill()

    assert new == f"local:{MODEL_NAME}"
    mine = Memory.objects.get(pk=ours.pk)
    assert mine.embedding_model == new
    assert 0.97 < cosine(list(mine.embedding), list(before)) < 0.99999
    client = Memory.objects.get(pk=theirs.pk)
    assert (client.embedding_model, list(client.embedding)[:2]) == ("", [1.0, 0.0])
    assert set(KnowledgeChunk.objects.values_list("embedding_model", flat=True)) == {new}
    assert list(EventEmbedding.objects.filter(event=event).values_list("model", flat=True)) == [new]
    assert redone == 1
    assert list(
        DissentEmbedding.objects.filter(dissent_id=dissent.pk).values_list("model", flat=True)
    ) == [new]
    # Nothing is left to do: a second run writes nothing.
    assert dissent_embeddings_backfill() == 0
    assert not Memory.objects.filter(embedding_model=old).exists()


def test_embedder_prepare_makes_the_file_an_image_ships(settings, tmp_path, local_model):
    local_model("")
    settings.EMBEDDING_MODEL_DIR = tmp_path / "models"
    out = io.StringIO()

    call_command("embedder_prepare", stdout=out)

    (made,) = (tmp_path / "models").glob("*.onnx")
    assert out.getvalue().strip() == f"local:{MODEL_NAME}: {made}"
