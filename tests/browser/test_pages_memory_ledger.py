"""The memory explorer, ledger browser, jobs and token savings pages in a real browser, on the
demo data: one real interaction each, and a screenshot of each (var/screenshots/)."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.demo import demo_data_seed
from ledger.jobs import job_schedules_ensure
from ledger.models import Event, Role
from ledger.services import EventDraft, events_append
from ledger.tasks import event_chains_verify_task
from memory.models import Memory
from memory.tasks import memories_decay_task, memories_expire_task


@pytest.fixture
def demo(tenant):
    """The demo data of ``up --demo``, a longer ledger, and real runs of a few jobs."""
    demo_data_seed(tenant=tenant)
    events_append(
        tenant=tenant,
        drafts=[
            EventDraft(
                kind="agent.spoke",
                actor="Reviewer1",
                run_id="run_20250216_080000",
                payload={"text": f"Checking shard {i} of the orders table <script>x()</script>"},
            )
            for i in range(70)
        ],
    )
    job_schedules_ensure()  # as `up` does; the test database starts without them
    for task in (event_chains_verify_task, memories_decay_task, memories_expire_task):
        task.apply()
    return tenant


def test_the_memory_explorer_shows_score_bars_as_you_type(page_as, demo, screenshot):
    page = page_as(Role.REVIEWER)
    page.goto("/memory/")
    page.get_by_label("Agent", exact=True).select_option(label="Reviewer2")
    page.get_by_label("Query").press_sequentially("dissent on payment changes", delay=20)

    # HTMX swaps the results in as the query is typed; no submit needed.
    page.wait_for_selector(".hit .bar__fill")
    assert page.locator(".hit").count() >= 1
    first = page.locator(".hit").first.inner_text()
    assert "Similarity" in first
    assert "Importance" in first
    assert "agent=" in page.url
    assert "q=dissent" in page.url
    screenshot("memory-explorer")

    # Archived memories are never returned by search; the status filter lists them apart.
    archived = Memory.objects.filter(agent__name="Reviewer2").order_by("pk").first()
    Memory.objects.filter(pk=archived.pk).update(archived_at=timezone.now())
    page.get_by_label("Query").fill("")
    page.get_by_label("Memories").select_option("inactive")
    page.wait_for_selector(".memory-item")
    assert page.locator(".memory-item").count() == 1
    assert "Archived" in page.locator(".memory-item").inner_text()
    screenshot("memory-explorer-archived")


def test_the_ledger_browser_loads_older_events_in_place(page_as, demo, screenshot):
    page = page_as(Role.REVIEWER)
    page.goto("/ledger/")
    assert page.locator(".event-row").count() == 50
    newest = int(page.locator(".event-row").first.get_attribute("data-seq"))
    assert page.get_by_text("Verified", exact=True).is_visible()
    # Agent text stays text: the <script> in the payloads never runs or becomes an element.
    assert page.locator("td.payload script").count() == 0

    page.get_by_role("link", name="Load older events").click()
    # (No wait_for_function: the Content-Security-Policy refuses its string evaluation.)
    page.locator(".event-row").nth(50).wait_for()
    expect(page.locator(".event-row").nth(50)).to_be_focused()

    seqs = [
        int(s)
        for s in page.locator(".event-row").evaluate_all("rows => rows.map(r => r.dataset.seq)")
    ]
    assert seqs == sorted(seqs, reverse=True)
    assert len(seqs) == len(set(seqs))
    assert seqs[0] == newest
    assert seqs[-1] == max(1, newest - len(seqs) + 1)
    assert page.url.endswith("/ledger/")
    page.locator(".event-row").nth(1).locator("summary").click()
    screenshot("ledger-browser")

    page.get_by_label("Kind").fill("verdict.final")
    page.get_by_label("Kind").press("Enter")
    page.wait_for_url("**kind=verdict.final**")
    assert (
        page.locator(".event-row").count()
        == Event.objects.filter(tenant=demo, kind="verdict.final").count()
    )
    screenshot("ledger-browser-filtered")


def test_the_jobs_page_shows_runs(page_as, demo, screenshot):
    # A tenant admin without staff sees no admin links (test_ledger_jobs_admin_pages.py).
    page = page_as(Role.ADMIN)
    page.goto("/jobs/")
    chain = page.locator("#job-ledgerchain_verify")
    assert "Succeeded" in chain.inner_text()
    assert chain.get_by_role("link", name="Edit in the admin").count() == 0
    screenshot("jobs")


def test_the_token_savings_page_switches_period(page_as, demo, screenshot):
    page = page_as(Role.REVIEWER)
    page.goto("/memory/token-savings/")
    assert page.locator("#savings tbody tr").count() == 2
    screenshot("token-savings")

    page.get_by_label("Runs with results in").select_option("7")
    page.wait_for_url("**period=7**")
    assert page.locator("#savings tbody tr").count() == 2
    assert int(page.locator("#tokens-saved").inner_text().replace(",", "")) > 0
