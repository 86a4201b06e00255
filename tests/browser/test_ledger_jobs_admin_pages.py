"""The ledger page's admin actions and filters, and the jobs page as a tenant admin, in a real
browser at a laptop's width and a phone's."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ledger.models import ChainVerification, Role
from ledger.services import EventDraft, events_append
from tests.browser.test_people_pages import WIDTHS, assert_fits


@pytest.fixture
def ledger_rows(tenant):
    events_append(
        tenant=tenant,
        drafts=[
            EventDraft(
                kind="agent.spoke" if i % 2 else "world.observed",
                actor="system",
                run_id=f"run-{i % 3}",
                payload={"text": f"step {i} <b>bold</b>"},
            )
            for i in range(120)
        ],
    )
    return tenant


@pytest.mark.parametrize("viewport", WIDTHS)
def test_an_admin_verifies_now_and_filters_from_rows(page_as, ledger_rows, screenshot, viewport):
    page = page_as(Role.ADMIN, username="boss")
    if viewport:
        page.set_viewport_size(viewport)
    suffix = "-phone" if viewport else ""
    page.goto("/ledger/")
    panel = page.locator("#chain-status")
    expect(panel.locator(".status")).to_have_text("Not checked yet")
    assert_fits(page, viewport)

    panel.get_by_role("button", name="Verify now").click()
    expect(page.locator("#chain-status .status")).to_have_text("Verified")
    expect(page.locator("#chain-status")).to_contain_text("Verified now by human:boss")
    assert ChainVerification.objects.get(tenant=ledger_rows).ok

    # A sequence number stays on one line, at 6 digits too.
    seq_cell = page.locator(".event-row td.seq").first
    height = seq_cell.evaluate("cell => cell.getBoundingClientRect().height")
    line = seq_cell.evaluate("cell => parseFloat(getComputedStyle(cell).lineHeight)")
    assert height < 2.5 * line + 20

    # A row's run link filters in place, then its kind link adds to that filter.
    page.locator(".event-row td:nth-child(5) a").first.click()
    page.wait_for_url("**run=run-**")
    run = page.get_by_label("Run").input_value()
    assert run.startswith("run-")
    page.locator(".event-row").first.locator("a.tag").click()
    page.wait_for_url("**kind=**")
    assert f"run={run}" in page.url
    kinds = set(page.locator(".event-row a.tag").all_inner_texts())
    runs = set(page.locator(".event-row td:nth-child(5) a").all_inner_texts())
    assert len(kinds) == 1
    assert runs == {run}
    expect(page.get_by_label("Kind")).to_have_value(kinds.pop())
    assert_fits(page, viewport)
    screenshot(f"ledger-verified-filtered{suffix}")

    page.get_by_label("From (UTC)").fill("2026-05-02T10:00")
    page.get_by_label("Before (UTC)").fill("2026-05-01T10:00")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#events .empty")).to_contain_text("From is not before Before")
    assert_fits(page, viewport)
    screenshot(f"ledger-empty-window{suffix}")


@pytest.mark.parametrize("viewport", WIDTHS)
def test_a_reviewer_has_no_verify_button(page_as, ledger_rows, viewport):
    page = page_as(Role.REVIEWER)
    if viewport:
        page.set_viewport_size(viewport)
    page.goto("/ledger/")
    expect(page.locator("#chain-status")).to_be_visible()
    expect(page.get_by_role("button", name="Verify now")).to_have_count(0)
    assert_fits(page, viewport)
