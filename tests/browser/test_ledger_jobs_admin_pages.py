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


def sign_in_staff(page, tenant, username="ops"):
    from django.contrib.auth import get_user_model

    from ledger.people.services import membership_grant
    from tests.browser.conftest import PASSWORD, log_in

    user = get_user_model().objects.create_superuser(username=username, password=PASSWORD)
    membership_grant(tenant=tenant, user=user, role=Role.ADMIN)
    return log_in(page, username)


@pytest.fixture
def scheduled(tenant):
    from ledger.jobs import job_schedules_ensure
    from ledger.tasks import idempotency_records_expire_task

    job_schedules_ensure()
    idempotency_records_expire_task.apply()
    return tenant


@pytest.mark.parametrize("viewport", WIDTHS)
def test_a_tenant_admin_reads_the_jobs_without_dead_links(page_as, scheduled, screenshot, viewport):
    page = page_as(Role.ADMIN)
    if viewport:
        page.set_viewport_size(viewport)
    page.goto("/jobs/")
    chain = page.locator("#job-ledgerchain_verify")
    expect(chain).to_contain_text("cron 0 3 * * * UTC")
    # Never run yet, daily at 03:00: its next run is an 03:00, not "now".
    expect(chain.locator("dd time").first).to_contain_text("03:00 UTC")
    expect(page.get_by_role("link", name="Edit in the admin")).to_have_count(0)
    expect(page.get_by_role("link", name="Admin", exact=True)).to_have_count(0)
    expect(page.get_by_text("your operator changes the schedule")).to_be_visible()
    assert_fits(page, viewport)
    screenshot(f"jobs-tenant-admin{'-phone' if viewport else ''}")


@pytest.mark.parametrize("viewport", WIDTHS)
def test_an_operator_changes_a_schedule_in_the_app(page, scheduled, screenshot, viewport):
    from django_celery_beat.models import PeriodicTask

    from ledger.models import Event

    if viewport:
        page.set_viewport_size(viewport)
    sign_in_staff(page, scheduled)
    page.goto("/jobs/")
    page.locator("#job-ledgeridempotency_expiry").get_by_role("link", name="Change").click()
    page.wait_for_url("**/jobs/schedule/**")
    card = page.locator("#schedule-ledgeridempotency_expiry")
    card.get_by_label("Every (minutes)").fill("30")
    card.get_by_role("button", name="Save").click()
    expect(page.get_by_text("ledger.idempotency_expiry: saved")).to_be_visible()
    assert PeriodicTask.objects.get(name="ledger.idempotency_expiry").interval.every == 30
    event = Event.objects.filter(tenant=scheduled, kind="job_schedule.updated").get()
    assert event.actor == "human:ops"
    assert event.payload["changes"] == {"every_minutes": 30}
    expect(page.locator("#schedule-ledgerchain_verify")).to_contain_text("always")
    assert_fits(page, viewport)
    screenshot(f"jobs-schedule{'-phone' if viewport else ''}")

    page.goto("/jobs/")
    expect(page.locator("#job-ledgeridempotency_expiry")).to_contain_text("every 30 minutes")
