"""The memory explorer and the token savings page: real search, score bars, filters, roles,
tenant isolation, escaping and bounded queries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains, assertRedirects

from memory.content.selectors import content_run_savings, content_runs_savings
from memory.content.services import ItemDraft, action_result_record
from memory.episodic.services import MemoryDraft, memories_store
from memory.episodic.views import bar_step
from memory.models import ContentItem, Memory
from memory.search.selectors import memories_search

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
DAY = datetime(2025, 2, 14, 15, 0, tzinfo=UTC)


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Creator1")


def store(agent, *contents, **fields):
    return memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(
                content=content, session_id="s1", occurred_at=DAY + timedelta(minutes=i), **fields
            )
            for i, content in enumerate(contents)
        ],
        actor="system",
    )


def hit_ids(response) -> list[int]:
    return [int(i) for i in re.findall(r"memory #(\d+)", response.content.decode())]


# --- access -----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/memory/", "/memory/token-savings/"])
def test_it_sends_anonymous_visitors_to_the_login_page(client, url):
    assertRedirects(client.get(url), f"/login/?next={url}", fetch_redirect_response=False)


@pytest.mark.parametrize("url", ["/memory/", "/memory/token-savings/"])
def test_it_refuses_a_person_without_a_seat(client_as, url):
    assert client_as(None).get(url).status_code == 403


@pytest.mark.parametrize("url", ["/memory/", "/memory/token-savings/"])
def test_it_refuses_writes(reviewer_client, url):
    assert reviewer_client.post(url).status_code == 405


# --- memory explorer --------------------------------------------------------------------------


def test_it_offers_only_the_tenants_agents(tenant, other_tenant, make_agent, reviewer_client):
    make_agent(tenant, name="Atlas")
    make_agent(other_tenant, name="Globex-Spy")

    response = reviewer_client.get("/memory/")

    assertContains(response, ">Atlas</option>")
    assertNotContains(response, "Globex-Spy")
    assertContains(response, "Choose an agent and type a query")


def test_it_shows_what_search_returns_with_each_term_as_a_bar(agent, reviewer_client):
    store(
        agent,
        "The nightly orders job failed with exit code 137 after the memory limit was halved.",
        "Lunch on Friday is pizza.",
        "The orders job memory limit is back to 8 GiB.",
        memory_type="fact",
    )
    expected = [
        h.id for h in memories_search(agent=agent, query="orders job memory limit", top_k=20).hits
    ]

    response = reviewer_client.get("/memory/", {"agent": agent.pk, "q": "orders job memory limit"})

    assert response.status_code == 200
    assert hit_ids(response) == [i for i in expected if i in hit_ids(response)]
    assert set(hit_ids(response)) == {i for i in expected if Memory.objects.filter(pk=i).exists()}
    body = response.content.decode()
    for label in ("Similarity", "Recency", "Importance", "Source priority"):
        assert f'<th scope="row" class="term__label">{label}</th>' in body
    # Every bar's width is a class of 2 % steps; no style attribute anywhere.
    widths = re.findall(r'class="bar__fill swatch--\w+ w-(\d+)"', body)
    assert widths
    assert all(int(w) % 2 == 0 and 0 <= int(w) <= 100 for w in widths)
    assert " style=" not in body


def test_the_bars_follow_the_score_terms(agent, reviewer_client):
    store(agent, "Deploys on Friday are frozen.", importance=0.9, memory_type="explicit")

    response = reviewer_client.get("/memory/", {"agent": agent.pk, "q": "deploys frozen Friday"})

    hit = memories_search(agent=agent, query="deploys frozen Friday").hits[0]
    body = response.content.decode()
    importance_bar = re.search(r'bar__fill swatch--importance w-(\d+)"', body).group(1)
    assert int(importance_bar) == bar_step(hit.breakdown["importance"])
    assertContains(response, f"{hit.score:.3f}")


def test_agent_written_text_is_escaped(agent, reviewer_client):
    store(agent, "<script>alert('pwned')</script> the deploy failed", memory_type="error")

    response = reviewer_client.get("/memory/", {"agent": agent.pk, "q": "deploy failed"})

    assertNotContains(response, "<script>alert")
    assertContains(response, "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;")


def test_another_tenants_agent_is_a_404(other_tenant, make_agent, reviewer_client):
    spy = make_agent(other_tenant, name="Spy")
    store(spy, "Globex launch codes are in the safe.")

    assert (
        reviewer_client.get("/memory/", {"agent": spy.pk, "q": "launch codes"}).status_code == 404
    )
    response = reviewer_client.get("/memory/", {"agent": spy.pk, "q": "launch codes"}, headers=HTMX)
    assert response.status_code == 404


def test_the_partial_swaps_the_results_only(agent, reviewer_client):
    store(agent, "The release train leaves on Tuesdays.")

    response = reviewer_client.get(
        "/memory/", {"agent": agent.pk, "q": "release train"}, headers=HTMX
    )

    body = response.content.decode()
    assert body.lstrip().startswith('<section id="explorer-results"')
    assert "<html" not in body
    assert hit_ids(response)


def test_it_filters_by_source_and_type(agent, reviewer_client):
    store(agent, "Rollback decided for the payments release.", memory_type="decision")
    store(agent, "Payments release rollback finished without errors.", memory_type="fact")

    decision = reviewer_client.get(
        "/memory/", {"agent": agent.pk, "q": "payments release rollback", "memory_type": "decision"}
    )
    kinds = {Memory.objects.get(pk=i).memory_type for i in hit_ids(decision)}
    assert kinds == {"decision"}
    kb_only = reviewer_client.get(
        "/memory/",
        {"agent": agent.pk, "q": "payments release rollback", "sources": "knowledge_base"},
    )
    assert hit_ids(kb_only) == []
    assertContains(kb_only, "Search returns nothing")


def test_archived_and_expired_memories_are_listed_apart_and_marked(agent, reviewer_client):
    kept, archived, expired = store(
        agent,
        "Staging database password rotates monthly.",
        "Staging database was moved to a new host.",
        "Staging database maintenance tonight.",
        memory_type="fact",
    )
    now = timezone.now()
    Memory.objects.filter(pk=archived.pk).update(archived_at=now)
    Memory.objects.filter(pk=expired.pk).update(expires_at=now - timedelta(minutes=1))

    searched = reviewer_client.get("/memory/", {"agent": agent.pk, "q": "staging database"})
    assert hit_ids(searched) == [kept.pk]

    listed = reviewer_client.get(
        "/memory/", {"agent": agent.pk, "q": "staging", "status": "inactive"}
    )
    body = listed.content.decode()
    assert "Never returned by search" in body
    assert f"#{archived.pk} " in body
    assert f"#{expired.pk} " in body
    assert f"#{kept.pk} " not in body
    assertContains(listed, "Archived <time")
    assertContains(listed, "Expired <time")


def test_exploring_does_not_count_as_the_agent_retrieving(agent, reviewer_client):
    (memory,) = store(agent, "The incident review is on Monday.")

    with mock.patch("memory.search.selectors._mark_retrieved") as mark:
        response = reviewer_client.get("/memory/", {"agent": agent.pk, "q": "incident review"})

    assert hit_ids(response) == [memory.pk]
    mark.assert_not_called()


@pytest.mark.parametrize(
    "params", [{"sources": "everything"}, {"status": "deleted"}, {"memory_type": "gossip"}]
)
def test_bad_input_is_a_400(agent, reviewer_client, params):
    response = reviewer_client.get("/memory/", {"agent": agent.pk, "q": "x", **params})
    assert response.status_code == 400
    assertContains(response, "Check the form", status_code=400)


def test_the_explorer_runs_a_bounded_number_of_queries(
    tenant, agent, make_agent, reviewer_client, django_assert_max_num_queries
):
    for i in range(20):
        make_agent(tenant, name=f"Helper{i}")
    store(agent, *[f"Runbook step {i}: restart the ingest worker {i}" for i in range(40)])

    with django_assert_max_num_queries(20):
        response = reviewer_client.get("/memory/", {"agent": agent.pk, "q": "restart ingest"})
    assert len(hit_ids(response)) == 20
    with django_assert_max_num_queries(8):
        reviewer_client.get("/memory/", {"agent": agent.pk, "status": "inactive"}, headers=HTMX)


# --- token savings ----------------------------------------------------------------------------


def record(agent, run_id, action_type, content, **draft):
    return action_result_record(
        agent=agent,
        actor=agent.name,
        run_id=run_id,
        action_type=action_type,
        draft=ItemDraft(content=content, **draft),
    )


def rows(n):
    return [{"id": i, "name": f"row {i}", "amount": i * 3.5, "status": "paid"} for i in range(n)]


def test_it_shows_full_versus_returned_tokens_per_run(
    tenant, other_tenant, agent, make_agent, reviewer_client
):
    for i in range(3):
        record(agent, "run-a", "sql.query", rows(40 + i))
    record(make_agent(tenant, name="Reviewer1"), "run-b", "web.fetch", "short page")
    record(make_agent(other_tenant, name="Spy"), "run-globex", "sql.query", rows(10))

    response = reviewer_client.get("/memory/token-savings/")

    body = response.content.decode()
    assert "run-globex" not in body
    for run_id in ("run-a", "run-b"):
        savings = content_run_savings(tenant=tenant, agent=None, run_id=run_id)
        assert savings is not None
        row = body[body.index(f">{run_id}</a>") :].split("</tr>")[0]
        assert f'data-label="Full">{savings.tokens_full:,}</td>' in row
        assert f'data-label="Returned">{savings.tokens_returned:,}</td>' in row
        assert re.search(rf"<strong[^>]*>{savings.tokens_saved:,}</strong>", row)
    run_a = content_run_savings(tenant=tenant, agent=None, run_id="run-a")
    assert run_a.tokens_saved > 0
    assert run_a.compacted_renderings == 2
    assert re.search(r"swatch--returned w-\d+", body)
    # A short page costs more in its rendering (the header line) than in full: said, not drawn.
    run_b = content_run_savings(tenant=tenant, agent=None, run_id="run-b")
    row_b = body[body.index(">run-b</a>") :].split("</tr>")[0]
    assert run_b.tokens_saved < 0
    assert f"{-run_b.tokens_saved:,} tokens more than in full" in row_b
    assert "swatch--returned" not in row_b


def test_the_totals_explain_a_period_that_saved_nothing(agent, reviewer_client):
    record(agent, "run-short", "web.fetch", "ok")
    record(agent, "run-short", "web.fetch", "ok too")

    body = reviewer_client.get("/memory/token-savings/").content.decode()

    total = content_runs_savings(tenant=agent.tenant, since=None).total
    assert total.tokens_saved < 0
    assert f"{-total.tokens_saved:,} tokens more returned than the {total.tokens_full:,}" in body
    assert "% of" not in body


def test_the_overview_agrees_with_each_runs_savings(tenant, agent, make_agent):
    other = make_agent(tenant, name="Curator1")
    for run_id in ("r1", "r2", "r3"):
        record(agent, run_id, "sql.query", rows(30))
        record(agent, run_id, "sql.query", rows(31))
        record(other, run_id, "sql.query", rows(5))

    overview = content_runs_savings(tenant=tenant, since=None)

    assert overview.runs_total == 3
    for run in overview.runs:
        alone = content_run_savings(tenant=tenant, agent=None, run_id=run.run_id)
        assert (run.tokens_full, run.tokens_returned, run.action_results) == (
            alone.tokens_full,
            alone.tokens_returned,
            alone.action_results,
        )
        assert run.agents == ("Creator1", "Curator1")
    assert overview.total.tokens_full == sum(r.tokens_full for r in overview.runs)


def test_the_period_leaves_out_older_runs(agent, reviewer_client):
    record(agent, "run-old", "web.fetch", "old page", timestamp=timezone.now() - timedelta(days=20))
    record(agent, "run-new", "web.fetch", "new page")

    week = reviewer_client.get("/memory/token-savings/", {"period": "7"}, headers=HTMX)
    month = reviewer_client.get("/memory/token-savings/", {"period": "30"})

    assert "run-old" not in week.content.decode()
    assert "run-new" in week.content.decode()
    assert "<html" not in week.content.decode()
    assertContains(month, "run-old")
    assertContains(month, '<option value="30" selected>')
    assertContains(reviewer_client.get("/memory/token-savings/"), '<option value="30" selected>')
    assert reviewer_client.get("/memory/token-savings/", {"period": "1y"}).status_code == 400


def test_savings_escape_agent_written_names(tenant, make_agent, reviewer_client):
    sneaky = make_agent(tenant, name="<script>x()</script>")
    record(sneaky, "<script>run()</script>", "web.fetch", "page")

    response = reviewer_client.get("/memory/token-savings/")

    assertNotContains(response, "<script>x()")
    assertNotContains(response, "<script>run()")
    assertContains(response, "&lt;script&gt;run()&lt;/script&gt;")


def test_savings_run_a_bounded_number_of_queries(
    tenant, agent, reviewer_client, django_assert_max_num_queries
):
    for i in range(60):
        record(agent, f"run-{i}", "web.fetch", f"page {i}")

    with django_assert_max_num_queries(6):
        response = reviewer_client.get("/memory/token-savings/")
    assert response.content.decode().count('<th scope="row">') == 50
    assertContains(response, "all 60")
    assert ContentItem.objects.filter(tenant=tenant).count() == 60


# --- demo data --------------------------------------------------------------------------------


def test_the_demo_gives_these_pages_data_once(reviewer_client, tenant):
    from ledger.demo import demo_data_seed

    first = demo_data_seed(tenant=tenant)
    again = demo_data_seed(tenant=tenant)

    assert "memories" in first.extras["memory"]
    assert "action results" in first.extras["memory"]
    assert "memory" not in again.extras
    reviewer = Memory.objects.get(tenant=tenant, agent__name="Reviewer2", memory_type="explicit")
    explorer = reviewer_client.get(
        "/memory/", {"agent": reviewer.agent_id, "q": "dissent on payment changes"}
    )
    assert reviewer.pk in hit_ids(explorer)
    savings = reviewer_client.get("/memory/token-savings/")
    assertContains(savings, "run_20250214_153000")
    assert content_runs_savings(tenant=tenant, since=None).total.tokens_saved > 0
