"""The knowledge-base API: documents, publishing, chunks and search."""

from __future__ import annotations

import pytest

from ledger.models import Event, Role
from memory.knowledge.services import KB_EVENT_KINDS
from memory.models import KnowledgeChunk, KnowledgeDocument

pytestmark = pytest.mark.django_db

DOCUMENTS = "/api/v1/kb/documents/"
ARTICLE = {
    "title": "Refund policy",
    "category": "billing",
    "body": "Returns within 30 days get a full refund.\n\n# Exceptions\n\nGift cards are final.",
}


@pytest.fixture
def reviewer(tenant, api_as, no_embedder):
    return api_as(tenant, role=Role.REVIEWER)


@pytest.fixture
def agent_client(tenant, make_agent, api_as, no_embedder):
    return api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Critic"))


def test_a_reviewer_writes_and_publishes_an_article_that_agents_then_read(reviewer, agent_client):
    created = reviewer.post(DOCUMENTS, ARTICLE, format="json")
    document_id = created.json()["id"]
    hidden = agent_client.get(f"{DOCUMENTS}{document_id}/")
    published = reviewer.post(f"{DOCUMENTS}{document_id}/publish/")
    read = agent_client.get(f"{DOCUMENTS}{document_id}/")
    chunks = agent_client.get(f"{DOCUMENTS}{document_id}/chunks/")

    assert created.status_code == 201, created.content
    assert created.json()["published"] is False
    assert created.json()["kind"] == "article"
    assert hidden.status_code == 404  # agents never see drafts
    assert published.status_code == 200
    assert published.json()["published"] is True
    assert read.json()["body"] == ARTICLE["body"]
    assert [(c["position"], c["heading"], c["embedded"]) for c in chunks.json()] == [
        (0, "Refund policy", False),
        (1, "Refund policy > Exceptions", False),
    ]


def test_a_document_can_be_published_as_it_is_written(reviewer):
    response = reviewer.post(DOCUMENTS, {**ARTICLE, "publish": True}, format="json")

    assert response.json()["published"] is True
    assert KnowledgeChunk.objects.count() == 2
    assert list(
        Event.objects.filter(kind__in=KB_EVENT_KINDS).order_by("seq").values_list("kind", "actor")
    ) == [
        ("kb.document_created", response.wsgi_request.user.actor),
        ("kb.document_published", response.wsgi_request.user.actor),
    ]


def test_listing_filters_by_kind_category_and_state(reviewer, agent_client):
    reviewer.post(DOCUMENTS, {**ARTICLE, "publish": True}, format="json")
    reviewer.post(DOCUMENTS, {**ARTICLE, "title": "Draft", "category": "misc"}, format="json")
    reviewer.post(
        DOCUMENTS,
        {"title": "Tone", "body": "Be brief.", "kind": "skill", "applies_to": ["Critic"]},
        format="json",
    )

    def titles(client, query=""):
        response = client.get(DOCUMENTS + query)
        assert response.status_code == 200, response.content
        return [d["title"] for d in response.json()["results"]]

    assert titles(reviewer) == ["Refund policy", "Draft", "Tone"]
    assert titles(reviewer, "?published=false") == ["Draft", "Tone"]
    assert titles(reviewer, "?published=true") == ["Refund policy"]
    assert titles(reviewer, "?kind=skill") == ["Tone"]
    assert titles(reviewer, "?category=misc") == ["Draft"]
    assert titles(agent_client) == ["Refund policy"]
    bad = reviewer.get(DOCUMENTS + "?published=yes")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_filter")


def test_listing_pages_with_a_cursor(reviewer):
    for i in range(3):
        reviewer.post(DOCUMENTS, {**ARTICLE, "title": f"Doc {i}"}, format="json")

    first = reviewer.get(DOCUMENTS + "?page_size=2").json()
    second = reviewer.get(first["next"]).json()

    assert [d["title"] for d in first["results"] + second["results"]] == ["Doc 0", "Doc 1", "Doc 2"]
    assert second["next"] is None


def test_editing_a_published_article_rechunks_it(reviewer):
    document = reviewer.post(DOCUMENTS, {**ARTICLE, "publish": True}, format="json").json()

    response = reviewer.patch(
        f"{DOCUMENTS}{document['id']}/", {"body": "Only one paragraph now."}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json()["body"] == "Only one paragraph now."
    assert list(KnowledgeChunk.objects.values_list("text", flat=True)) == [
        "Only one paragraph now."
    ]


def test_unpublishing_takes_a_document_out_of_search(reviewer, agent_client):
    document = reviewer.post(DOCUMENTS, {**ARTICLE, "publish": True}, format="json").json()
    found = agent_client.post("/api/v1/kb/search/", {"query": "gift cards"}, format="json")

    reviewer.post(f"{DOCUMENTS}{document['id']}/unpublish/")
    gone = agent_client.post("/api/v1/kb/search/", {"query": "gift cards"}, format="json")

    assert found.status_code == 200, found.content
    assert [hit["text"] for hit in found.json()["results"]] == ["Gift cards are final."]
    assert found.json()["results"][0]["title"] == "Refund policy"
    assert found.json()["semantic"] is False
    assert gone.json()["results"] == []


def test_search_explains_each_hit(tenant, api_as):
    client = api_as(tenant, role=Role.REVIEWER)
    client.post(DOCUMENTS, {**ARTICLE, "publish": True}, format="json")

    response = client.post(
        "/api/v1/kb/search/", {"query": "Are gift cards refundable?", "top_k": 1}, format="json"
    )

    hits = response.json()["results"]
    assert len(hits) == 1
    assert set(hits[0]) == {
        "chunk_id",
        "document_id",
        "title",
        "heading",
        "text",
        "cosine",
        "keyword",
        "score",
    }
    assert hits[0]["text"] == "Gift cards are final."
    assert hits[0]["cosine"] > 0.3
    assert hits[0]["keyword"] > 0
    assert response.json()["semantic"] is True


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"query": " "}, "empty_query"),
        ({"query": "x", "top_k": 0}, "invalid_top_k"),
        ({"query": "x", "top_k": 51}, "invalid_top_k"),
    ],
)
def test_a_bad_search_is_refused_with_its_code(agent_client, body, code):
    response = agent_client.post("/api/v1/kb/search/", body, format="json")

    assert (response.status_code, response.json()["error"]["code"]) == (400, code)


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"title": ""}, "empty_title"),
        ({"body": "   "}, "empty_body"),
        ({"body": "x" * 101}, "body_too_long"),
        ({"kind": "manual"}, "invalid_kind"),
        ({"applies_to": ["Critic"]}, "invalid_applies_to"),
        # Refused by the JSON parser before any field (config.api.JsonParser).
        ({"title": "a\x00b"}, "invalid_value"),
        ({"applies_to": "Critic"}, "validation_error"),
    ],
)
def test_a_bad_document_is_refused_with_its_code_and_nothing_is_written(
    reviewer, settings, overrides, code
):
    settings.KB_MAX_BODY_CHARS = 100
    events = Event.objects.count()

    response = reviewer.post(DOCUMENTS, {**ARTICLE, "publish": True, **overrides}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert not KnowledgeDocument.objects.exists()
    assert Event.objects.count() == events


def test_a_bad_edit_is_refused_and_changes_nothing(reviewer):
    document = reviewer.post(DOCUMENTS, {**ARTICLE, "publish": True}, format="json").json()
    events = Event.objects.count()

    response = reviewer.patch(f"{DOCUMENTS}{document['id']}/", {"title": " "}, format="json")

    assert (response.status_code, response.json()["error"]["code"]) == (400, "empty_title")
    assert reviewer.get(f"{DOCUMENTS}{document['id']}/").json() == document
    assert Event.objects.count() == events


def test_only_an_admin_deletes_and_the_document_is_gone(tenant, reviewer, api_as):
    document = reviewer.post(DOCUMENTS, {**ARTICLE, "publish": True}, format="json").json()
    url = f"{DOCUMENTS}{document['id']}/"

    refused = reviewer.delete(url)
    deleted = api_as(tenant, role=Role.ADMIN).delete(url)

    assert refused.status_code == 403
    assert deleted.status_code == 204
    assert reviewer.get(url).status_code == 404
    assert not KnowledgeChunk.objects.exists()


def test_a_retried_create_with_the_same_idempotency_key_writes_once(reviewer):
    first = reviewer.post(DOCUMENTS, ARTICLE, format="json", HTTP_IDEMPOTENCY_KEY="kb-1")
    again = reviewer.post(DOCUMENTS, ARTICLE, format="json", HTTP_IDEMPOTENCY_KEY="kb-1")

    assert first.json() == again.json()
    assert again["Idempotent-Replayed"] == "true"
    assert KnowledgeDocument.objects.count() == 1


def test_a_skill_has_no_chunks_even_when_published(reviewer):
    skill = reviewer.post(
        DOCUMENTS,
        {"title": "Tone", "body": "Be brief.", "kind": "skill", "publish": True},
        format="json",
    ).json()

    assert skill["published"] is True
    assert reviewer.get(f"{DOCUMENTS}{skill['id']}/chunks/").json() == []
