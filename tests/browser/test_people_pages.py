"""People and tenants in a real browser, at a laptop's width and a phone's: an admin grants a
seat on the People page and finds it in the ledger; a person with two seats switches tenant."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from ledger.models import Event, Membership, Role
from ledger.people.services import membership_grant
from ledger.services import tenant_create
from tests.browser.conftest import PASSWORD, log_in

PHONE = {"width": 390, "height": 844}
WIDTHS = [pytest.param(None, id="1366"), pytest.param(PHONE, id="390")]


def page_width(page) -> int:
    return int(page.evaluate("() => document.documentElement.scrollWidth"))


def nav_rows(page) -> int:
    tops = page.locator(".site-nav__link").evaluate_all(
        "links => links.map(link => Math.round(link.getBoundingClientRect().top))"
    )
    return len(set(tops))


def assert_fits(page, viewport) -> None:
    """No wider than the screen, and the sections on one row."""
    width = viewport["width"] if viewport else 1366
    assert page_width(page) <= width
    assert nav_rows(page) == 1


@pytest.mark.parametrize("viewport", WIDTHS)
def test_an_admin_grants_a_seat_and_the_ledger_shows_it(page_as, tenant, screenshot, viewport):
    page = page_as(Role.ADMIN, username="boss")
    if viewport:
        page.set_viewport_size(viewport)
    suffix = "-phone" if viewport else ""
    get_user_model().objects.create_user(username="carol", password=PASSWORD)

    page.get_by_role("link", name="People").click()
    page.wait_for_url("**/people/")
    assert_fits(page, viewport)
    page.get_by_label("Username").fill("carol")
    page.get_by_label("Role", exact=True).select_option("reviewer")
    page.get_by_role("button", name="Invite").click()
    expect(page.get_by_role("status").filter(has_text="carol now has a seat")).to_be_visible()
    expect(page.locator("[data-username=carol]")).to_be_visible()
    assert Membership.objects.get(tenant=tenant, user__username="carol").role == Role.REVIEWER

    # A new person gets an account and a link to choose a password, shown once.
    page.get_by_label("Username").fill("dave")
    page.get_by_role("button", name="Invite").click()
    expect(page.locator(".people__link code")).to_contain_text("/welcome/")

    carol = page.locator("[data-username=carol]")
    carol.get_by_label("Role of carol").select_option("admin")
    carol.get_by_role("button", name="Change role").click()
    expect(page.get_by_text("carol is now admin.")).to_be_visible()
    assert_fits(page, viewport)
    screenshot(f"people{suffix}")

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("[data-username=dave]").get_by_role("button", name="Remove").click()
    expect(page.locator("[data-username=dave]")).to_have_count(0)

    page.get_by_role("link", name="Ledger").click()
    page.get_by_label("Kind").fill("membership.role_changed")
    page.get_by_label("Kind").press("Enter")
    page.wait_for_url("**kind=membership.role_changed**")
    row = page.locator(".event-row").first
    expect(row).to_contain_text("human:boss")
    expect(row).to_contain_text('"username": "carol"')
    kinds = list(
        Event.objects.filter(tenant=tenant, actor="human:boss").values_list("kind", flat=True)
    )
    assert kinds == [
        "membership.granted",
        "membership.granted",
        "membership.role_changed",
        "membership.removed",
    ]
    assert_fits(page, viewport)
    screenshot(f"people-in-the-ledger{suffix}", doc=not viewport)


@pytest.mark.parametrize("viewport", WIDTHS)
def test_a_person_with_two_seats_switches_tenant(page, live_server, tenant, screenshot, viewport):
    if viewport:
        page.set_viewport_size(viewport)
    globex = tenant_create(name="Globex", slug="globex")
    gina = get_user_model().objects.create_user(username="gina", password=PASSWORD)
    membership_grant(tenant=tenant, user=gina, role=Role.REVIEWER)
    membership_grant(tenant=globex, user=gina, role=Role.ADMIN)
    log_in(page, "gina")

    switch = page.get_by_label("Tenant")
    expect(switch.locator("option:checked")).to_have_text("Acme Research")
    expect(page.get_by_role("link", name="People")).to_have_count(0)  # a reviewer here
    assert_fits(page, viewport)
    switch.select_option(label="Globex")
    page.get_by_role("button", name="Switch").click()
    expect(page.get_by_text("You are now working in Globex as admin.")).to_be_visible()
    expect(page.get_by_label("Tenant").locator("option:checked")).to_have_text("Globex")

    page.get_by_role("link", name="Ledger").click()
    expect(page.locator(".page-heading")).to_contain_text("Every event of Globex")
    expect(page.locator(".event-row").first).to_contain_text("membership.granted")
    page.get_by_role("link", name="People").click()
    expect(page.locator("[data-username=gina]")).to_be_visible()
    assert_fits(page, viewport)
    screenshot(f"tenant-switched{'-phone' if viewport else ''}", doc=bool(viewport))


@pytest.mark.parametrize("viewport", WIDTHS)
def test_the_navigation_is_one_row_on_every_section(page_as, tenant, viewport):
    page = page_as(Role.ADMIN)
    if viewport:
        page.set_viewport_size(viewport)
    links = page.locator(".site-nav__list a.site-nav__link").evaluate_all(
        "links => links.map(link => link.getAttribute('href'))"
    )
    assert "/people/" in links
    for href in links:
        if href.startswith("/api/"):
            continue  # Swagger UI: a page of its own, without our header
        page.goto(href)
        assert nav_rows(page) == 1, href
        # The strip scrolls inside itself; the page keeps the screen's width (its header too).
        header = page.locator(".site-header").evaluate("h => h.scrollWidth")
        assert header <= (viewport or {"width": 1366})["width"], href
