"""The content store over /api/v1/content/ (SPEC 7): store, transforms, query, clear, snapshots,
restore, and the rules for bad input."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from ledger.models import Event, Role
from memory.models import ContentAttachment, ContentItem, ContentSnapshot

pytestmark = pytest.mark.django_db

PAGE = "line one\nline two has the needle in it\nline three\n" + "filler text\n" * 50


@pytest.fixture
def creator(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


@pytest.fixture
def helper(tenant, make_agent):
    return make_agent(tenant, name="Helper1")


@pytest.fixture
def as_creator(tenant, creator, api_as) -> APIClient:
    return api_as(tenant, role=Role.AGENT, agent=creator)


@pytest.fixture
def as_helper(tenant, helper, api_as) -> APIClient:
    return api_as(tenant, role=Role.AGENT, agent=helper)


def store(client: APIClient, content, **fields) -> dict:
    response = client.post(
        "/api/v1/content/items/", {"content": content, "run_id": "run-1", **fields}, format="json"
    )
    assert response.status_code == 201, response.json()
    return response.json()


def read(client: APIClient, item_id: str, **params):
    return client.get(f"/api/v1/content/items/{item_id}/", params)


def test_it_stores_text_and_gives_it_back_byte_for_byte(as_creator):
    text = "Ünïcode page\r\n  with trailing spaces  \n\tand tabs"

    item = store(as_creator, text, type="web_content", source="https://example.org/a")
    answer = read(as_creator, item["id"]).json()

    assert len(item["id"]) == 12
    assert answer["content"] == text
    assert item["content_hash"] == hashlib.sha256(text.encode()).hexdigest()
    assert item["size"] == len(text.encode())
    assert (item["type"], item["scope"], item["run_id"]) == ("web_content", "run", "run-1")


def test_json_content_comes_back_as_the_same_value(as_creator):
    rows = {"columns": ["id", "name"], "rows": [[1, "a"], [2, "b"]]}

    item = store(as_creator, rows, type="database_result")

    assert item["format"] == "json"
    assert read(as_creator, item["id"]).json()["content"] == rows


def test_a_store_is_a_ledger_event_with_hash_and_size_but_never_the_content(as_creator):
    item = store(as_creator, "the secret body of a page", tags=["web"])

    event = Event.objects.get(kind="content.stored")

    assert event.payload["item_id"] == item["id"]
    assert event.payload["sha256"] == item["content_hash"]
    assert event.payload["size"] == item["size"]
    assert "secret" not in json.dumps(event.payload)
    assert (event.actor, event.run_id) == ("Creator1", "run-1")


def test_content_over_the_limit_is_413_and_stores_nothing(as_creator, settings):
    settings.CONTENT_MAX_BYTES = 100
    events = Event.objects.count()

    response = as_creator.post("/api/v1/content/items/", {"content": "x" * 101}, format="json")

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "content_too_large"
    assert not ContentItem.objects.exists()
    assert Event.objects.count() == events


def test_an_unknown_related_item_is_400_and_nothing_is_half_stored(as_creator):
    events = Event.objects.count()

    response = as_creator.post(
        "/api/v1/content/items/", {"content": "x", "related_to": ["nosuchitem01"]}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_related_item"
    assert not ContentItem.objects.exists()
    assert Event.objects.count() == events


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"transform": "shout"}, "unknown_transform"),
        ({"transform": "first_n", "n": "-1"}, "invalid_parameter"),
        ({"transform": "last_n", "n": "ten"}, "invalid_parameter"),
        ({"transform": "first_n"}, "missing_parameter"),
        ({"transform": "first_n", "n": "2", "unit": "items"}, "invalid_unit"),
        ({"transform": "first_n", "n": "2", "unit": "pages"}, "invalid_unit"),
        ({"transform": "excerpt", "start": "10", "end": "100000"}, "excerpt_out_of_range"),
        ({"transform": "excerpt", "start": "100000"}, "excerpt_out_of_range"),
        ({"transform": "excerpt", "start": "20", "end": "10"}, "excerpt_out_of_range"),
        ({"transform": "excerpt", "phrase": "absent words"}, "phrase_not_found"),
        ({"transform": "filtered", "pattern": "(unclosed"}, "invalid_pattern"),
        ({"transform": "filtered"}, "invalid_filter"),
        ({"transform": "filtered", "keys": "a"}, "invalid_filter"),
        ({"transform": "filtered", "match": "a", "pattern": "b"}, "invalid_filter"),
    ],
)
def test_bad_transform_parameters_are_400_with_a_stable_code(as_creator, params, code):
    item = store(as_creator, PAGE)

    response = read(as_creator, item["id"], **params)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


def test_an_excerpt_by_range_and_around_a_phrase(as_creator):
    item = store(as_creator, PAGE)

    by_range = read(as_creator, item["id"], transform="excerpt", start=5, end=17).json()
    around = read(as_creator, item["id"], transform="excerpt", phrase="NEEDLE", context=4).json()

    assert by_range["content"] == PAGE[5:17]
    assert around["content"] == "the needle in "
    assert around["details"]["start"] == PAGE.index("needle") - 4


def test_first_and_last_n_by_lines_items_and_characters(as_creator):
    text = store(as_creator, PAGE)
    listing = store(as_creator, [{"a": 1}, {"a": 2}, {"a": 3}])

    first_lines = read(as_creator, text["id"], transform="first_n", n=2).json()
    last_chars = read(as_creator, text["id"], transform="last_n", n=5, unit="chars").json()
    last_items = read(as_creator, listing["id"], transform="last_n", n=2).json()
    none = read(as_creator, listing["id"], transform="last_n", n=0).json()

    assert first_lines["content"] == "line one\nline two has the needle in it\n"
    assert last_chars["content"] == "text\n"
    assert last_items["content"] == [{"a": 2}, {"a": 3}]
    assert last_items["details"] == {"n": 2, "unit": "items", "total": 3}
    assert none["content"] == []


def test_filtered_keeps_keys_of_objects_or_matching_lines(as_creator):
    rows = store(as_creator, [{"id": 1, "name": "a", "blob": "x"}, {"id": 2, "name": "b"}])
    text = store(as_creator, PAGE)

    by_keys = read(as_creator, rows["id"], transform="filtered", keys="id,name").json()
    by_match = read(as_creator, text["id"], transform="filtered", match="needle").json()
    by_pattern = read(as_creator, text["id"], transform="filtered", pattern=r"^line (one|three)$")

    assert by_keys["content"] == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert by_match["content"] == "line two has the needle in it"
    assert by_pattern.json()["content"] == "line one\nline three"


def test_the_summary_transform_is_the_deterministic_compaction(as_creator):
    page = "<html><head><title>A Title</title></head><body><p>Body words</p></body></html>"
    item = store(as_creator, page, source="https://example.org/p")

    first = read(as_creator, item["id"], transform="summary").json()
    again = read(as_creator, item["id"], transform="summary").json()

    assert first == again
    assert first["details"]["compactor"] == "web_page"
    assert first["content"]["title"] == "A Title"
    assert first["content"]["url"] == "https://example.org/p"


def test_a_query_returns_metadata_only_filtered_by_type_source_tags_and_time(as_creator):
    past = (timezone.now() - timedelta(days=3)).isoformat()
    old = store(as_creator, "old", type="web_content", tags=["web", "a"], timestamp=past)
    new = store(as_creator, "new", type="web_content", tags=["web"], source="search")
    store(as_creator, {"x": 1}, type="database_result")

    by_type = as_creator.get("/api/v1/content/items/", {"type": "web_content"}).json()
    by_tags = as_creator.get("/api/v1/content/items/", {"tags": "web,a"}).json()
    by_source = as_creator.get("/api/v1/content/items/", {"source": "search"}).json()
    recent = as_creator.get(
        "/api/v1/content/items/", {"since": (timezone.now() - timedelta(days=1)).isoformat()}
    ).json()
    limited = as_creator.get("/api/v1/content/items/", {"limit": 1}).json()

    assert [i["id"] for i in by_type] == [new["id"], old["id"]]
    assert [i["id"] for i in by_tags] == [old["id"]]
    assert [i["id"] for i in by_source] == [new["id"]]
    assert old["id"] not in {i["id"] for i in recent}
    assert len(recent) == 2
    assert len(limited) == 1
    assert all("content" not in i and "body" not in i for i in by_type)


def test_a_bad_query_limit_is_400(as_creator):
    response = as_creator.get("/api/v1/content/items/", {"limit": 0})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_parameter"


def test_a_cleared_run_answers_404_and_keeps_its_audit_row(as_creator):
    cleared = store(as_creator, "in the run")
    kept = store(as_creator, "the agent's own", scope="agent")

    response = as_creator.post("/api/v1/content/items/clear/", {"run_id": "run-1"}, format="json")

    assert response.json() == {"cleared": 1}
    assert read(as_creator, cleared["id"]).status_code == 404
    assert read(as_creator, kept["id"]).status_code == 200
    assert ContentItem.objects.get(key=cleared["id"]).body == ""
    assert Event.objects.filter(kind="content.cleared").count() == 1


def test_an_agent_key_never_reaches_another_agents_item(as_creator, as_helper):
    item = store(as_creator, "mine")

    foreign = read(as_helper, item["id"])
    missing = read(as_helper, "nosuchitem01")

    assert foreign.status_code == 404
    assert foreign.json() == missing.json()
    assert as_helper.get("/api/v1/content/items/").json() == []


def test_an_idempotent_store_is_stored_once(as_creator):
    body = {"content": "once", "run_id": "run-1"}

    url = "/api/v1/content/items/"
    first = as_creator.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = as_creator.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k1")

    assert first.json()["id"] == again.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert ContentItem.objects.count() == 1


# --- Snapshots ---------------------------------------------------------------------------------


def snapshot_for_helper(as_creator, *item_ids: str, **fields) -> dict:
    response = as_creator.post(
        "/api/v1/content/snapshots/",
        {"item_ids": list(item_ids), "grantee": "Helper1", **fields},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_sub_agent_reads_through_a_snapshot_and_nothing_is_copied(as_creator, as_helper):
    item = store(as_creator, PAGE)
    snapshot = snapshot_for_helper(as_creator, item["id"])

    through = read(as_helper, item["id"], snapshot=snapshot["id"], transform="first_n", n=1)
    without = read(as_helper, item["id"])

    assert through.status_code == 200
    assert through.json()["content"] == "line one\n"
    assert without.status_code == 404
    assert [i["id"] for i in snapshot["items"]] == [item["id"]]
    assert ContentItem.objects.count() == 1


def test_a_snapshot_for_one_sub_agent_is_not_readable_by_another(
    tenant, as_creator, helper, make_agent, api_as
):
    item = store(as_creator, PAGE)
    snapshot = snapshot_for_helper(as_creator, item["id"])
    stranger = api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Stranger1"))

    assert read(stranger, item["id"], snapshot=snapshot["id"]).status_code == 404
    assert stranger.get(f"/api/v1/content/snapshots/{snapshot['id']}/").status_code == 404


def test_a_snapshot_can_never_be_used_to_write(as_creator, as_helper):
    item = store(as_creator, PAGE)
    snapshot = snapshot_for_helper(as_creator, item["id"])
    before = (
        list(ContentItem.objects.values_list("key", "content_hash", "cleared_at")),
        list(ContentSnapshot.objects.get(key=snapshot["id"]).items.values_list("key", flat=True)),
    )
    url = f"/api/v1/content/snapshots/{snapshot['id']}/"
    item_url = f"/api/v1/content/items/{item['id']}/?snapshot={snapshot['id']}"

    refused = [
        as_helper.put(url, {"items": []}, format="json"),
        as_helper.patch(url, {"items": []}, format="json"),
        as_helper.delete(url),
        as_helper.put(item_url, {"content": "overwritten"}, format="json"),
        as_helper.patch(item_url, {"content": "overwritten"}, format="json"),
        as_helper.delete(item_url),
    ]
    as_helper.post(f"/api/v1/content/items/clear/?snapshot={snapshot['id']}", {"run_id": "run-1"})
    as_bearer = APIClient()
    as_bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {snapshot['id']}")

    assert {r.status_code for r in refused} == {405}
    assert as_bearer.post("/api/v1/content/items/", {"content": "x"}).status_code == 401
    assert before == (
        list(ContentItem.objects.values_list("key", "content_hash", "cleared_at")),
        list(ContentSnapshot.objects.get(key=snapshot["id"]).items.values_list("key", flat=True)),
    )
    assert read(as_creator, item["id"]).json()["content"] == PAGE


def test_a_snapshot_of_an_item_outside_the_owners_scope_is_404(as_creator, as_helper):
    theirs = store(as_helper, "helper's")

    response = as_creator.post(
        "/api/v1/content/snapshots/", {"item_ids": [theirs["id"]]}, format="json"
    )

    assert response.status_code == 404
    assert not ContentSnapshot.objects.exists()


def test_an_empty_snapshot_is_400(as_creator):
    response = as_creator.post("/api/v1/content/snapshots/", {"run_id": "nothing"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "empty_snapshot"


def test_a_cleared_item_is_gone_from_its_snapshots_too(as_creator, as_helper):
    item = store(as_creator, PAGE)
    snapshot = snapshot_for_helper(as_creator, run_id="run-1")

    as_creator.post("/api/v1/content/items/clear/", {"run_id": "run-1"}, format="json")

    assert read(as_helper, item["id"], snapshot=snapshot["id"]).status_code == 404


def test_restore_attaches_the_items_to_the_sub_agents_run_by_reference(as_creator, as_helper):
    item = store(as_creator, PAGE)
    snapshot = snapshot_for_helper(as_creator, item["id"])

    restored = as_helper.post(
        f"/api/v1/content/snapshots/{snapshot['id']}/restore/", {"run_id": "sub-run"}, format="json"
    )
    again = as_helper.post(
        f"/api/v1/content/snapshots/{snapshot['id']}/restore/", {"run_id": "sub-run"}, format="json"
    )
    listed = as_helper.get("/api/v1/content/items/", {"run_id": "sub-run"}).json()

    assert restored.json()["items"] == 1
    assert again.status_code == 200
    assert [i["id"] for i in listed] == [item["id"]]
    assert read(as_helper, item["id"]).json()["content"] == PAGE
    assert ContentAttachment.objects.count() == 1
    assert ContentItem.objects.count() == 1


def test_clearing_the_restored_run_detaches_but_the_owner_keeps_the_item(as_creator, as_helper):
    item = store(as_creator, PAGE)
    snapshot = snapshot_for_helper(as_creator, item["id"])
    as_helper.post(
        f"/api/v1/content/snapshots/{snapshot['id']}/restore/", {"run_id": "sub-run"}, format="json"
    )

    as_helper.post("/api/v1/content/items/clear/", {"run_id": "sub-run"}, format="json")

    assert read(as_helper, item["id"]).status_code == 404
    assert read(as_creator, item["id"]).json()["content"] == PAGE
