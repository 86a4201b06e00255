"""The knowledge base (SPEC 6): documents, chunks, the ledger, and how search reads them."""

from __future__ import annotations

import random

import pytest
from django.db import connection

from config.api import ApiError
from ledger.models import Event
from ledger.projections import projection_rebuild, registered_projections, reserved_kinds
from memory.episodic.sealing import unseal
from memory.knowledge.selectors import (
    knowledge_candidates,
    knowledge_candidates_query,
    knowledge_search,
    skill_find,
    skills_for_agent,
)
from memory.knowledge.services import (
    KB_EVENT_KINDS,
    DocumentFields,
    knowledge_chunks_embed_backfill,
    knowledge_document_create,
    knowledge_document_delete,
    knowledge_document_publish,
    knowledge_document_unpublish,
    knowledge_document_update,
)
from memory.models import KnowledgeChunk, KnowledgeDocument, KnowledgeKey

pytestmark = pytest.mark.django_db

REFUNDS = """Customers may return any item within 30 days of delivery for a full refund.

# Exceptions

Gift cards and opened software are final sale and cannot be refunded.

# How to ask

Write to the support desk with the order number; refunds reach the card in five days."""


def create(tenant, title="Refund policy", body=REFUNDS, publish=False, **fields):
    return knowledge_document_create(
        tenant=tenant,
        fields=DocumentFields(title=title, body=body, **fields),
        actor="human:alice",
        publish=publish,
    )


def kb_events(tenant):
    return list(Event.objects.filter(tenant=tenant, kind__in=KB_EVENT_KINDS).order_by("seq"))


def chunk_rows(document):
    return list(
        KnowledgeChunk.objects.filter(document=document)
        .order_by("position")
        .values_list("position", "heading", "text")
    )


def knowledge_projection():
    return next(p for p in registered_projections() if p.name == "knowledge_base")


# --- writing ------------------------------------------------------------------------------------


def test_publishing_an_article_splits_it_into_embedded_chunks(tenant):
    document = create(tenant)

    assert not KnowledgeChunk.objects.exists()
    knowledge_document_publish(document=document, actor="human:alice")

    assert chunk_rows(document) == [
        (0, "Refund policy", REFUNDS.split("\n\n")[0]),
        (1, "Refund policy > Exceptions", REFUNDS.split("\n\n")[2]),
        (2, "Refund policy > How to ask", REFUNDS.split("\n\n")[4]),
    ]
    chunk = KnowledgeChunk.objects.get(document=document, position=1)
    assert len(chunk.embedding) == 384
    assert chunk.embedding_model == "local:all-MiniLM-L6-v2-int8-dynamic"
    document.refresh_from_db()
    assert document.published
    assert [e.kind for e in kb_events(tenant)] == ["kb.document_created", "kb.document_published"]
    assert kb_events(tenant)[1].payload == {
        "document_id": document.pk,
        "published_at": document.published_at.isoformat(),
        "chunks": 3,
    }


def test_the_ledger_holds_the_title_and_body_only_sealed(tenant, no_embedder):
    document = create(tenant, title="Vault procedure", body="The vault code is 7-4-1-9.")

    created = kb_events(tenant)[0]
    assert created.actor == "human:alice"
    assert set(created.payload) == {"document_id", "kind", "category", "applies_to", "sealed"}
    assert "7-4-1-9" not in str(created.payload)
    assert "Vault" not in str(created.payload)
    key = KnowledgeKey.objects.get(document_id=document.pk).key
    opened = unseal(key=key, sealed=created.payload["sealed"])
    assert (opened["title"], opened["body"]) == ("Vault procedure", "The vault code is 7-4-1-9.")
    # No displayable text either: the audit-log search and recall never show these events.
    assert created.text == ""


def test_deleting_a_document_shreds_its_text_and_chunks(tenant, no_embedder):
    document = create(tenant, publish=True)
    document_id = document.pk

    knowledge_document_delete(document=document, actor="human:root")

    assert not KnowledgeDocument.objects.exists()
    assert not KnowledgeChunk.objects.exists()
    assert not KnowledgeKey.objects.filter(document_id=document_id).exists()
    deleted = kb_events(tenant)[-1]
    assert (deleted.kind, deleted.payload) == (
        "kb.document_deleted",
        {"document_id": document_id, "kind": "article"},
    )


def test_a_skill_is_published_whole_and_never_chunked(tenant, no_embedder):
    skill = create(tenant, title="Reviewer duties", kind="skill", publish=True)

    assert skill.published
    assert not KnowledgeChunk.objects.exists()
    assert knowledge_candidates(tenant=tenant, query="refund", query_vector=None, limit=10) == []


def test_editing_a_published_article_rechunks_it_and_keeps_unchanged_chunks(tenant):
    document = create(tenant, publish=True)
    before = dict(KnowledgeChunk.objects.filter(document=document).values_list("position", "id"))
    body = REFUNDS.replace("five days", "three days")

    knowledge_document_update(document=document, actor="human:bob", changes={"body": body})

    after = dict(KnowledgeChunk.objects.filter(document=document).values_list("position", "id"))
    assert (after[0], after[1]) == (before[0], before[1])
    assert after[2] != before[2]
    assert chunk_rows(document)[2][2].endswith("three days.")
    assert KnowledgeChunk.objects.filter(embedding__isnull=True).count() == 0
    updated = kb_events(tenant)[-1]
    assert updated.kind == "kb.document_updated"
    assert set(updated.payload["changes"]) == {"sealed"}


def test_renaming_a_published_article_renames_its_chunk_headings(tenant, no_embedder):
    document = create(tenant, publish=True)

    knowledge_document_update(document=document, actor="x", changes={"title": "Returns"})

    assert [row[1] for row in chunk_rows(document)] == [
        "Returns",
        "Returns > Exceptions",
        "Returns > How to ask",
    ]


def test_editing_a_draft_makes_no_chunks(tenant, no_embedder):
    document = create(tenant)

    knowledge_document_update(document=document, actor="x", changes={"category": "billing"})

    assert not KnowledgeChunk.objects.exists()
    assert kb_events(tenant)[-1].payload == {
        "document_id": document.pk,
        "changes": {"category": "billing"},
    }


def test_an_edit_that_changes_nothing_logs_nothing(tenant, no_embedder):
    document = create(tenant, category="billing")
    events = Event.objects.count()

    knowledge_document_update(
        document=document, actor="x", changes={"category": "billing", "body": REFUNDS}
    )

    assert Event.objects.count() == events


def test_publishing_and_unpublishing_twice_logs_once_each(tenant, no_embedder):
    document = create(tenant)

    knowledge_document_publish(document=document, actor="x")
    knowledge_document_publish(document=document, actor="x")
    knowledge_document_unpublish(document=document, actor="x")
    knowledge_document_unpublish(document=document, actor="x")

    assert [e.kind for e in kb_events(tenant)] == [
        "kb.document_created",
        "kb.document_published",
        "kb.document_unpublished",
    ]
    assert not KnowledgeChunk.objects.exists()
    document.refresh_from_db()
    assert document.published_at is None


def test_turning_a_published_article_into_a_skill_drops_its_chunks(tenant, no_embedder):
    document = create(tenant, publish=True)

    knowledge_document_update(
        document=document, actor="x", changes={"kind": "skill", "applies_to": ["Critic"]}
    )

    assert not KnowledgeChunk.objects.exists()


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"title": "  "}, "empty_title"),
        ({"title": "t" * 301}, "title_too_long"),
        ({"body": "\n\t "}, "empty_body"),
        ({"body": "x" * 51}, "body_too_long"),
        ({"kind": "manual"}, "invalid_kind"),
        ({"category": "c" * 101}, "category_too_long"),
        ({"body": "null\x00byte"}, "invalid_text"),
        ({"applies_to": ("Critic",)}, "invalid_applies_to"),
        ({"kind": "skill", "applies_to": ("",)}, "invalid_applies_to"),
    ],
)
def test_a_bad_document_is_refused_and_nothing_is_written(tenant, settings, fields, code):
    settings.KB_MAX_BODY_CHARS = 50
    events = Event.objects.count()
    values = {"title": "Title", "body": "Body.", **fields}

    with pytest.raises(ApiError) as raised:
        knowledge_document_create(
            tenant=tenant, fields=DocumentFields(**values), actor="x", publish=True
        )

    assert raised.value.error_code == code
    assert raised.value.status_code == 400
    assert not KnowledgeDocument.objects.exists()
    assert not KnowledgeKey.objects.exists()
    assert Event.objects.count() == events


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"title": ""}, "empty_title"),
        ({"body": " "}, "empty_body"),
        ({"applies_to": ["Critic"]}, "invalid_applies_to"),
        ({"published_at": None}, "field_not_editable"),
    ],
)
def test_a_bad_edit_changes_nothing(tenant, no_embedder, changes, code):
    document = create(tenant, publish=True)
    chunks = chunk_rows(document)
    events = Event.objects.count()

    with pytest.raises(ApiError) as raised:
        knowledge_document_update(document=document, actor="x", changes=changes)

    assert raised.value.error_code == code
    stored = KnowledgeDocument.objects.get(pk=document.pk)
    assert (stored.title, stored.body, stored.published) == ("Refund policy", REFUNDS, True)
    assert chunk_rows(document) == chunks
    assert Event.objects.count() == events


def test_chunks_published_during_an_embedder_outage_are_embedded_later(tenant, settings):
    from memory.embeddings.backends import embedder_reset

    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_URL = "http://127.0.0.1:9/v1"
    settings.EMBEDDING_TIMEOUT_SECONDS = 0.5
    embedder_reset()
    document = create(tenant, publish=True)
    assert KnowledgeChunk.objects.filter(embedding__isnull=True).count() == 3
    # Keyword search finds them meanwhile.
    found = knowledge_candidates(tenant=tenant, query="gift", query_vector=None, limit=5)
    assert [c.text for c in found] == [chunk_rows(document)[1][2]]

    settings.EMBEDDING_BACKEND = "local"
    embedder_reset()
    try:
        filled = knowledge_chunks_embed_backfill()
        again = knowledge_chunks_embed_backfill()
    finally:
        embedder_reset()

    assert (filled, again) == (3, 0)
    assert KnowledgeChunk.objects.filter(embedding__isnull=True).count() == 0


# --- reading ------------------------------------------------------------------------------------


def test_keyword_candidates_match_any_query_word_ranked_by_relevance(tenant, no_embedder):
    create(tenant, publish=True)
    create(tenant, title="Shipping", body="Parcels leave the warehouse daily.", publish=True)

    found = knowledge_candidates(
        tenant=tenant, query="Can I refund gift cards?", query_vector=None, limit=10
    )

    assert found[0].text.startswith("Gift cards")  # two words in common, and the title's
    assert {c.title for c in found} == {"Refund policy"}
    assert all(c.keyword > 0 and c.cosine is None for c in found)
    assert found[0].kind == "article"


@pytest.mark.parametrize(
    "query",
    [
        "refund's policy",
        "refund' | !gift",
        "refund\\",
        "refund & (gift",
        "refund:* <-> gift",
        "100% refund_ %%",
        "'; DROP TABLE memory_knowledgechunk; --",
    ],
)
def test_query_text_is_never_read_as_tsquery_operators_or_sql(tenant, no_embedder, query):
    document = create(tenant, publish=True)

    found = knowledge_candidates(tenant=tenant, query=query, query_vector=None, limit=10)

    assert KnowledgeChunk.objects.filter(document=document).count() == 3
    if "refund" in query:
        assert found  # the word still matches; the punctuation around it is plain text


def test_a_query_with_no_words_finds_nothing_and_does_not_fail(tenant, no_embedder):
    create(tenant, publish=True)

    assert knowledge_candidates(tenant=tenant, query="?! the", query_vector=None, limit=5) == []


def test_drafts_and_another_tenants_chunks_are_never_candidates(tenant, other_tenant):
    create(tenant, title="Draft policy", body="Refunds are handled by robots.")
    create(other_tenant, publish=True)
    from memory.embeddings.backends import embed_query

    vector = embed_query("refund")

    assert knowledge_candidates(tenant=tenant, query="refund", query_vector=vector, limit=10) == []


def test_every_candidate_has_its_cosine_when_the_query_has_a_vector(tenant):
    from memory.embeddings.backends import embed_query

    create(tenant, publish=True)

    found = knowledge_candidates(
        tenant=tenant, query="gift cards", query_vector=embed_query("gift cards"), limit=1
    )

    # limit 1 per leg: the nearest chunk and the best keyword chunk, all with a cosine.
    assert 1 <= len(found) <= 2
    assert all(c.cosine is not None and -1 <= c.cosine <= 1 for c in found)
    assert found[0].text.startswith("Gift cards")


def test_a_query_vector_of_another_dimension_falls_back_to_keywords(tenant, no_embedder):
    create(tenant, publish=True)

    found = knowledge_candidates(tenant=tenant, query="gift", query_vector=[0.25] * 16, limit=5)

    assert [c.cosine for c in found] == [None]


def unit(rng: random.Random) -> list[float]:
    vector = [rng.gauss(0, 1) for _ in range(384)]
    norm = sum(v * v for v in vector) ** 0.5
    return [v / norm for v in vector]


def explain(sql: str, params: dict, *, off: tuple[str, ...]) -> str:
    # On tables this small the planner would rather read everything; switching the other plans
    # off shows which index the query can use.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_knowledgechunk")
        for plan in off:
            cursor.execute(f"SET LOCAL {plan} = off")
        cursor.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_index_returns_the_exact_nearest_chunks_when_other_tenants_crowd_it(
    tenant, other_tenant, no_embedder
):
    rng = random.Random(5)
    mine = create(tenant, body="\n\n".join(f"# S{i}\nmine {i}" for i in range(12)), publish=True)
    create(other_tenant, body="\n\n".join(f"# S{i}\ntheirs {i}" for i in range(400)), publish=True)
    for chunk in KnowledgeChunk.objects.all():
        chunk.embedding = unit(rng)
        chunk.save(update_fields=["embedding"])
    query = unit(rng)

    found = knowledge_candidates(tenant=tenant, query="", query_vector=query, limit=5)
    plan = explain(
        *knowledge_candidates_query(tenant=tenant, query="", query_vector=query, limit=5),
        off=("enable_seqscan", "enable_sort", "enable_bitmapscan"),
    )

    assert "kbchunk_embedding_hnsw" in plan
    own = list(KnowledgeChunk.objects.filter(document=mine))

    def cosine(chunk: KnowledgeChunk) -> float:
        return sum(a * b for a, b in zip(chunk.embedding, query, strict=True))

    exact = sorted(own, key=cosine, reverse=True)[:5]
    assert [c.chunk_id for c in found] == [c.pk for c in exact]
    assert [c.cosine for c in found] == pytest.approx([cosine(c) for c in exact], abs=1e-5)


def test_the_keyword_leg_reads_the_tenants_full_text_index(tenant, other_tenant, no_embedder):
    create(tenant, publish=True)
    create(other_tenant, body="\n\n".join(f"# S{i}\nrefund {i}" for i in range(300)), publish=True)

    plan = explain(
        *knowledge_candidates_query(tenant=tenant, query="gift", query_vector=None, limit=5),
        off=("enable_seqscan",),
    )

    assert "Bitmap Index Scan on kbchunk_search_vector" in plan
    found = knowledge_candidates(tenant=tenant, query="refund", query_vector=None, limit=50)
    assert {c.title for c in found} == {"Refund policy"}


def test_knowledge_search_ranks_fuses_and_collapses_duplicates(tenant):
    create(tenant, publish=True)
    create(
        tenant,
        title="Copy",
        body="Gift cards and opened software are final sale and cannot be refunded.",
        publish=True,
    )

    outcome = knowledge_search(tenant=tenant, query="Can gift cards be refunded?", top_k=3)

    assert outcome.semantic
    texts = [hit.text for hit in outcome.hits]
    assert texts[0].startswith("Gift cards")
    assert len(texts) == len(set(texts))
    assert all(0 <= hit.score <= 1 for hit in outcome.hits)
    assert [h.score for h in outcome.hits] == sorted((h.score for h in outcome.hits), reverse=True)


def test_knowledge_search_refuses_an_empty_query(tenant, no_embedder):
    with pytest.raises(ApiError) as raised:
        knowledge_search(tenant=tenant, query="  ", top_k=3)

    assert raised.value.error_code == "empty_query"


def test_memory_search_finds_published_chunks_as_its_knowledge_base_source(
    tenant, make_agent, no_embedder
):
    from memory.search.selectors import memories_search

    agent = make_agent(tenant, name="Atlas")
    document = create(tenant, publish=True)

    outcome = memories_search(
        agent=agent, query="gift cards refunded", sources=["knowledge_base"], top_k=3
    )

    assert outcome.hits
    hit = outcome.hits[0]
    assert hit.source == "knowledge_base"
    assert hit.content.startswith("Gift cards")
    assert hit.details["document_id"] == document.pk
    assert hit.details["title"] == "Refund policy"


def test_skills_apply_to_the_agents_they_name_or_to_everyone(
    tenant, other_tenant, make_agent, no_embedder
):
    critic, creator = make_agent(tenant, name="Critic"), make_agent(tenant, name="Creator")
    everyone = create(tenant, title="House style", kind="skill", publish=True)
    for_critic = create(
        tenant, title="Critique", kind="skill", applies_to=("Critic",), publish=True
    )
    create(tenant, title="Draft skill", kind="skill")
    create(tenant, title="An article", publish=True)
    create(other_tenant, title="Foreign skill", kind="skill", publish=True)

    assert skills_for_agent(critic) == [for_critic, everyone]
    assert skills_for_agent(creator) == [everyone]


def test_a_skill_is_found_by_id_or_title_but_never_across_tenants(
    tenant, other_tenant, no_embedder
):
    skill = create(tenant, title="Critique", kind="skill", publish=True)
    foreign = create(other_tenant, title="Foreign", kind="skill", publish=True)
    draft = create(tenant, title="Draft", kind="skill")

    assert skill_find(tenant=tenant, reference=skill.pk) == skill
    assert skill_find(tenant=tenant, reference="Critique") == skill
    for reference in (foreign.pk, "Foreign", draft.pk, 10**9):
        with pytest.raises(ApiError) as raised:
            skill_find(tenant=tenant, reference=reference)
        assert raised.value.error_code == "unknown_skill"


# --- the ledger ----------------------------------------------------------------------------------


def test_kb_kinds_are_reserved_for_the_service():
    assert reserved_kinds() >= KB_EVENT_KINDS


def test_a_rebuild_reproduces_documents_and_chunks(tenant, no_embedder):
    kept = create(tenant, publish=True, category="billing")
    knowledge_document_update(
        document=kept, actor="x", changes={"body": REFUNDS + "\n\n# Late\nAsk a manager."}
    )
    draft = create(tenant, title="Draft", body="Not yet.")
    withdrawn = create(tenant, title="Old", body="Old rules.", publish=True)
    knowledge_document_unpublish(document=withdrawn, actor="x")
    skill = create(tenant, title="Tone", body="Be brief.", kind="skill", applies_to=("A",))
    knowledge_document_publish(document=skill, actor="x")
    knowledge_document_delete(document=create(tenant, title="Gone", body="Bye."), actor="x")
    projection = knowledge_projection()
    before = projection.snapshot(tenant=tenant)
    kept_ids = set(KnowledgeChunk.objects.values_list("id", flat=True))

    assert projection_rebuild(projection=projection, tenant=tenant) is True
    assert set(KnowledgeChunk.objects.values_list("id", flat=True)) == kept_ids

    KnowledgeDocument.objects.filter(pk=kept.pk).update(title="tampered")
    KnowledgeChunk.objects.filter(document=kept, position=1).delete()
    KnowledgeChunk.objects.filter(document=kept, position=0).update(text="tampered")
    KnowledgeDocument.objects.filter(pk=draft.pk).delete()
    KnowledgeDocument.objects.filter(pk=skill.pk).update(published_at=None, applies_to=[])

    assert projection_rebuild(projection=projection, tenant=tenant) is False
    assert projection.snapshot(tenant=tenant) == before
    assert len(chunk_rows(kept)) == 4
    assert projection_rebuild(projection=projection, tenant=tenant) is True
