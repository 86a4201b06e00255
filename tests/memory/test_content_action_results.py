"""The action-result flow (SPEC 7): full the first time an action type appears in an agent's run,
compacted later, always with the item id; token savings per run; the optional LLM compactor."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.models import Event, Role
from memory.content.compaction import Content, html_to_text, url_base
from memory.content.services import ItemDraft, action_result_record
from memory.context.tokens import token_count
from memory.models import ContentItem
from tests.concurrency import run_concurrently
from tests.standins import openai_standin

PAGE = (
    "<html><head><title>Orchids of Borneo</title></head><body>"
    + "<p>Orchids grow in the canopy of the rain forest. </p>" * 200
    + "</body></html>"
)


@pytest.fixture
def creator(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


@pytest.fixture
def client(tenant, creator, api_as):
    return api_as(tenant, role=Role.AGENT, agent=creator)


def post_result(client, result: Any, action_type: str = "web.fetch", run_id: str = "run-1", **kw):
    response = client.post(
        "/api/v1/content/action-results/",
        {"run_id": run_id, "action_type": action_type, "result": result, **kw},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return response.json()


@pytest.mark.django_db
def test_the_first_result_of_an_action_type_is_full_and_later_ones_compacted(client):
    first = post_result(client, PAGE, source="https://example.org/orchids")
    second = post_result(client, PAGE, source="https://example.org/orchids")

    assert first["first_time"] is True
    assert PAGE in first["conversation"]
    assert first["item"]["id"] in first["conversation"]
    assert second["first_time"] is False
    assert PAGE not in second["conversation"]
    assert second["item"]["id"] in second["conversation"]
    assert f"/api/v1/content/items/{second['item']['id']}/" in second["conversation"]
    assert second["summary"]["title"] == "Orchids of Borneo"
    assert second["summary"]["url"] == "https://example.org/orchids"
    assert len(second["summary"]["excerpt"]) <= 501
    assert second["retrieve"]["url"] == f"/api/v1/content/items/{second['item']['id']}/"


def body_of(answer: dict[str, Any]) -> list[str]:
    """The lines under a conversation rendering's header, after checking the header names the
    item and where its full content is."""
    key = answer["item"]["id"]
    header, *body = answer["conversation"].split("\n")
    assert header.startswith(f"[content {key} · ")
    assert header.endswith(f" GET /api/v1/content/items/{key}/]")
    return body


@pytest.mark.django_db
def test_renderings_are_one_header_line_then_the_content(client):
    first = post_result(client, PAGE, source="https://example.org/orchids")
    second = post_result(client, PAGE, source="https://example.org/orchids")
    key = second["item"]["id"]

    assert first["conversation"] == (
        f"[content {first['item']['id']} · {len(PAGE):,} bytes, in full · "
        f"GET /api/v1/content/items/{first['item']['id']}/]\n{PAGE}"
    )
    header, title_line, excerpt = second["conversation"].split("\n")
    assert header == (
        f"[content {key} · compacted web page, {len(PAGE):,} chars · "
        f"full: GET /api/v1/content/items/{key}/]"
    )
    assert title_line == "Orchids of Borneo · https://example.org/orchids"
    assert excerpt == second["summary"]["excerpt"]
    assert excerpt.startswith("Orchids grow in the canopy of the rain forest. Orchids grow")
    assert len(excerpt) == 501  # 500 characters and the ellipsis
    assert excerpt.endswith("…")


@pytest.mark.django_db
def test_first_time_is_per_action_type_per_run_per_agent(tenant, client, make_agent, api_as):
    post_result(client, "a")
    other_type = post_result(client, "b", action_type="sql.query")
    other_run = post_result(client, "c", run_id="run-2")
    peer = api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Peer1"))
    other_agent = post_result(peer, "d")

    assert other_type["first_time"]
    assert other_run["first_time"]
    assert other_agent["first_time"]


@pytest.mark.django_db
def test_the_full_content_stays_retrievable_after_compaction(client):
    post_result(client, PAGE)
    later = post_result(client, PAGE + "<!-- v2 -->")

    full = client.get(later["retrieve"]["url"]).json()

    assert full["content"] == PAGE + "<!-- v2 -->"


@pytest.mark.django_db
def test_token_counts_are_recorded_per_item_and_summed_per_run(client):
    first = post_result(client, PAGE)
    second = post_result(client, PAGE)

    savings = client.get("/api/v1/content/runs/run-1/").json()

    assert first["tokens"]["returned"] == token_count(first["conversation"])
    assert first["tokens"]["returned"] > first["tokens"]["full"]  # the full content and its id
    assert second["tokens"]["returned"] == token_count(second["conversation"])
    assert second["tokens"]["returned"] < second["tokens"]["full"] / 10
    assert savings["action_results"] == 2
    assert (savings["full_renderings"], savings["compacted_renderings"]) == (1, 1)
    assert savings["tokens_full"] == first["tokens"]["full"] + second["tokens"]["full"]
    assert savings["tokens_returned"] == first["tokens"]["returned"] + second["tokens"]["returned"]
    event = Event.objects.filter(kind="content.stored").last()
    assert event.payload["tokens_returned"] == second["tokens"]["returned"]


@pytest.mark.django_db
def test_a_run_without_action_results_has_no_savings(client):
    response = client.get("/api/v1/content/runs/nothing-here/")

    assert response.status_code == 404


@pytest.mark.django_db
def test_compaction_is_chosen_by_content_type(client):
    post_result(client, "x", action_type="search")
    post_result(client, "x", action_type="sql")
    post_result(client, "x", action_type="json")
    post_result(client, "x", action_type="log")
    hits = [{"title": f"Hit {i}", "url": f"https://e.org/{i}", "snippet": "s"} for i in range(3)]
    rows = [[i, f"n{i}"] for i in range(10)]
    table = {"columns": ["id", "name"], "rows": rows}

    search = post_result(client, {"results": hits}, action_type="search")["summary"]
    sql = post_result(client, table, action_type="sql", type="database_result")["summary"]
    shape = post_result(client, {"a": {"b": [1, 2]}, "c": "x"}, action_type="json")["summary"]
    text = post_result(client, "\n".join(f"row {i}" for i in range(20)), action_type="log")

    assert search == {
        "count": 3,
        "results": [{"title": f"Hit {i}", "url": f"https://e.org/{i}"} for i in range(3)],
    }
    assert sql == {"columns": ["id", "name"], "row_count": 10, "first_rows": rows[:3]}
    assert shape["shape"] == {"a": {"b": {"array(2) of": "number"}}, "c": "string"}
    assert text["summary"]["head"].startswith("row 0")
    assert text["summary"]["tail"].endswith("row 19")
    assert text["summary"]["lines"] == 20


@pytest.mark.django_db
def test_each_content_type_has_a_terse_rendering(client):
    for action_type in ("search", "sql", "json", "log"):
        post_result(client, "x", action_type=action_type)
    hits = [{"title": f"Hit {i}", "url": f"https://e.org/docs/{i}.html"} for i in range(3)]
    rows = [{"id": i, "name": f"n|{i}", "note": None} for i in range(10)]

    search = post_result(client, {"results": hits}, action_type="search")
    sql = post_result(client, rows, action_type="sql", type="database_result")
    shape = post_result(client, {"a": {"b": [1, 2]}, "c": "x"}, action_type="json")
    log = post_result(client, "\n".join(f"row {i}" for i in range(20)), action_type="log")

    assert "compacted search results, 3 ·" in search["conversation"]
    assert body_of(search) == [
        "urls relative to https://e.org/docs/",
        "Hit 0 · 0.html",
        "Hit 1 · 1.html",
        "Hit 2 · 2.html",
    ]
    assert "compacted table, 10 rows ·" in sql["conversation"]
    assert body_of(sql) == [
        "id | name | note",
        "0 | n\\|0 | null",
        "1 | n\\|1 | null",
        "2 | n\\|2 | null",
    ]
    size = shape["item"]["size"]
    assert f"compacted JSON, {size:,} bytes ·" in shape["conversation"]
    assert body_of(shape) == ["{a: {b: [2 x number]}, c: string}"]
    assert "compacted text, 20 lines, 129 chars ·" in log["conversation"]
    assert body_of(log) == [
        *(f"row {i}" for i in range(5)),
        "[… 10 lines …]",
        *(f"row {i}" for i in range(15, 20)),
    ]


@pytest.mark.django_db
def test_a_short_text_is_shown_without_a_gap(client):
    post_result(client, "x", action_type="log")

    log = post_result(client, "one\ntwo\nthree", action_type="log")

    assert body_of(log) == ["one", "two", "three"]


def test_search_urls_share_a_base_only_when_every_one_goes_on_past_it():
    assert url_base(["https://a.org/d/1", "https://a.org/d/2"]) == "https://a.org/d/"
    assert url_base(["https://a.org/d/1", "https://a.org/e/2"]) == "https://a.org/"
    assert url_base(["https://a.org/1", "https://b.org/1"]) == ""
    assert url_base(["https://a.org/", "https://a.org/x"]) == ""
    assert url_base(["https://a.org/s?q=a/1", "https://a.org/s?q=a/2"]) == "https://a.org/"
    assert url_base(["https://a.org/only"]) == ""


@pytest.mark.django_db
def test_search_results_from_different_sites_keep_whole_urls(client):
    post_result(client, "x", action_type="search")
    hits = [
        {"title": "Orchids\n of  Borneo", "link": "https://a.org/orchids"},
        {"title": "Canopy", "link": "https://b.org/canopy"},
    ]

    search = post_result(client, hits, action_type="search")

    assert body_of(search) == [
        "Orchids of Borneo · https://a.org/orchids",
        "Canopy · https://b.org/canopy",
    ]


def test_the_page_excerpt_keeps_words_that_inline_tags_split():
    page = "<html><body><h1>email.<b>mime</b></h1><p>A <a href='x'>link</a></p><p>end</p>"

    assert html_to_text(page) == "email.mime A link end"


class ShoutingPlugin:
    """A deployment's own plugin, loaded from CONTENT_COMPACTION_PLUGINS."""

    name = "shouting"

    def accepts(self, content: Content) -> bool:
        return content.text.startswith("LOUD")

    def compact(self, content: Content) -> dict[str, Any]:
        return {"loud": True, "length": len(content.text)}


@pytest.mark.django_db
def test_a_deployment_adds_its_own_plugin(client, settings):
    settings.CONTENT_COMPACTION_PLUGINS = [f"{__name__}.ShoutingPlugin"]
    post_result(client, "LOUD first")

    later = post_result(client, "LOUD second")
    quiet = post_result(client, "quiet")

    assert later["summary"] == {"loud": True, "length": 11}
    # A plugin without render() is shown as its summary on one JSON line.
    assert "compacted shouting, 11 bytes ·" in later["conversation"]
    assert body_of(later) == ['{"loud": true, "length": 11}']
    assert ContentItem.objects.get(key=later["item"]["id"]).compactor == "shouting"
    assert "loud" not in quiet["summary"]


@pytest.mark.django_db
def test_an_llm_endpoint_compacts_when_configured(client, settings):
    with openai_standin() as standin:
        standin.chat_reply = "Orchids live in the canopy."
        settings.CONTENT_COMPACTOR_LLM_URL = standin.url
        settings.CONTENT_COMPACTOR_LLM_API_KEY = "llm-key"
        post_result(client, PAGE)
        later = post_result(client, PAGE, goal="find orchid habitats")

    assert later["summary"] == {"summary": "Orchids live in the canopy."}
    assert f"compacted summary, {len(PAGE):,} bytes ·" in later["conversation"]
    assert body_of(later) == ["Orchids live in the canopy."]
    assert ContentItem.objects.get(key=later["item"]["id"]).compactor == "llm"
    sent = standin.requests[0]
    assert sent["auth"] == "Bearer llm-key"
    assert "find orchid habitats" in sent["body"]["messages"][1]["content"]


@pytest.mark.django_db
def test_a_failing_llm_endpoint_falls_back_to_the_plugins(client, settings):
    with openai_standin() as standin:
        standin.fail_with = 503
        settings.CONTENT_COMPACTOR_LLM_URL = standin.url
        post_result(client, PAGE)
        later = post_result(client, PAGE)

    assert later["summary"]["title"] == "Orchids of Borneo"
    assert ContentItem.objects.get(key=later["item"]["id"]).compactor == "web_page"


@pytest.mark.django_db
def test_an_action_result_over_the_limit_is_413(client, settings):
    settings.CONTENT_MAX_BYTES = 10

    response = client.post(
        "/api/v1/content/action-results/",
        {"run_id": "r", "action_type": "a", "result": "x" * 11},
        format="json",
    )

    assert response.status_code == 413
    assert not ContentItem.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_first_results_arriving_together_make_exactly_one_first(tenant, creator):
    def work(index: int) -> bool:
        return action_result_record(
            agent=creator,
            actor="Creator1",
            run_id="race",
            action_type="web.fetch",
            draft=ItemDraft(content=f"page {index}"),
        ).first_time

    results = run_concurrently(work, threads=4)

    assert sorted(results) == [False, False, False, True]
    assert ContentItem.objects.filter(run_id="race", rendering="full").count() == 1
