"""The review flow in a real browser (issue 20, item 3), at a laptop's width and a phone's: one
override at a time with its diff, worked through by keyboard with focus kept; filters kept in the
URL so Back works; history paged beyond 7 days; bulk confirm. No page wider than the screen."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.models import Event, Role
from tests.browser.test_trust_pages import SCRIPT_TEXT
from trust.models import Override
from trust.rounds import overrides

WIDTHS = [pytest.param(1366, id="1366"), pytest.param(390, id="390")]


def _log(agent, *, hours_ago: float, output: str, decision: str, by: str, round_id: str):
    return overrides.override_log(
        agent=agent,
        agent_output=output,
        human_decision=decision,
        decided_by=by,
        round_id=round_id,
        occurred_at=timezone.now() - timedelta(hours=hours_ago),
        actor="orchestrator",
    )


@pytest.fixture
def waiting(tenant, make_agent) -> list[Override]:
    """Three overrides waiting for review, the oldest (nearest deadline) first."""
    critic = make_agent(tenant, name="Critic1")
    builder = make_agent(tenant, name="Builder2")
    return [
        _log(
            critic,
            hours_ago=3,
            output="Ship the quarterly report as drafted; the revenue figures were checked "
            "by the finance agent yesterday.",
            decision="Hold the quarterly report until the revenue figures are checked by a "
            "person; the finance agent read last year's sheet.",
            by="human:sam",
            round_id="round-7",
        ),
        _log(
            builder,
            hours_ago=2,
            output=f"Deploy to production now. {SCRIPT_TEXT}",
            decision=f"Deploy to staging first. {SCRIPT_TEXT}",
            by="human:kim",
            round_id="round-8",
        ),
        _log(
            critic,
            hours_ago=1,
            output="Reply to the customer with the standard refund text.",
            decision="Reply to the customer with an apology and a full refund.",
            by="human:sam",
            round_id="round-9",
        ),
    ]


def _fits(page: Any, width: int) -> None:
    sizes = page.evaluate(
        "() => ({scroll: document.documentElement.scrollWidth, inner: window.innerWidth})"
    )
    assert sizes["scroll"] <= sizes["inner"] == width, sizes


def _focus_lands(page: Any, *, id: str = "", key: str = "") -> None:
    """Wait until the element with ``id`` (or ``data-focus-key`` ``key``) has the focus: the
    flow moves it when htmx settles the swap, a moment after the URL changed."""
    page.wait_for_function(
        """([id, key]) => {
            const active = document.activeElement;
            return id ? active.id === id : active.dataset.focusKey === key;
        }""",
        arg=[id, key],
        timeout=5_000,
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_a_reviewer_works_through_overrides_by_keyboard(page_as, waiting, screenshot, width):
    first, second, third = waiting
    page = page_as(Role.REVIEWER, username="ada")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/trust/review/")
    page.get_by_role("link", name="Overrides: filters, history and one at a time").click()
    page.get_by_role("link", name="Review one at a time").click()
    page.wait_for_url(f"**/trust/review/overrides/{first.pk}/")

    item = page.locator("#review-item")
    expect(item.locator("h2")).to_have_text(f"Override #{first.pk} of Critic1")
    expect(item.locator(".word-diff del").first).to_have_text("Ship ")
    expect(item.locator(".word-diff ins").first).to_have_text("Hold ")
    expect(page.locator("#key-hint")).to_contain_text("j or n next")
    assert (
        item.get_by_role("button", name="Confirm: the decision stands c").get_attribute(
            "aria-keyshortcuts"
        )
        == "c"
    )
    _fits(page, width)
    screenshot(f"review-detail-{width}", doc=True)

    # j: the next one; k: back. The URL follows, so Back and a reload show the same override.
    page.keyboard.press("j")
    page.wait_for_url(f"**/trust/review/overrides/{second.pk}/")
    # Agent text is text: the script and the image are shown, never run.
    expect(item.locator(".side-by-side .text-box").first).to_contain_text(SCRIPT_TEXT)
    assert page.locator("#review-item script, #review-item img").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    page.keyboard.press("k")
    page.wait_for_url(f"**/trust/review/overrides/{first.pk}/")

    # c confirms and moves on; the status line says what happened; focus goes to the heading.
    page.keyboard.press("c")
    page.wait_for_url(f"**/trust/review/overrides/{second.pk}/")
    expect(page.locator("#review-status")).to_contain_text(
        f"Confirmed override #{first.pk} of Critic1"
    )
    _focus_lands(page, id="review-item-heading")
    assert Event.objects.filter(
        kind="override.confirmed", actor="human:ada", payload__override_id=first.pk
    ).exists()

    # r opens the reason; Enter marks it regretted and moves on; Undo takes it back.
    page.keyboard.press("r")
    _focus_lands(page, id="review-note")
    page.keyboard.type("staging broke last week")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/trust/review/overrides/{third.pk}/")
    expect(page.locator("#review-status")).to_contain_text(
        f"Marked override #{second.pk} regretted: Builder2's trust"
    )
    assert Override.objects.get(pk=second.pk).revert_note == "staging broke last week"
    # The note field keeps the focus for the next override: the reviewer stays where they were.
    _focus_lands(page, key="note")
    page.evaluate("() => window.scrollTo(0, 0)")
    screenshot(f"review-after-regret-{width}", doc=width == 390)
    page.get_by_role("button", name="Undo: withdraw that regret").click()
    page.wait_for_url(f"**/trust/review/overrides/{second.pk}/")
    expect(page.locator("#review-status")).to_contain_text(
        f"Withdrew the revert of override #{second.pk}"
    )
    assert Override.objects.get(pk=second.pk).reverted_at is None
    # The undone override has settled (its heading takes the focus) before a person could move:
    # the URL and the status line change a moment before htmx settles the swap.
    _focus_lands(page, id="review-item-heading")

    # A control used with Tab and Enter keeps the focus in the next override.
    page.locator("#review-item [data-key=confirm]").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/trust/review/overrides/{third.pk}/")
    _focus_lands(page, key="confirm")
    page.go_back()
    page.wait_for_url(f"**/trust/review/overrides/{second.pk}/")
    _fits(page, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_filters_combine_in_the_url_and_back_restores_them(page_as, waiting, screenshot, width):
    first, _, third = waiting
    page = page_as(Role.REVIEWER)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/trust/review/overrides/")
    expect(page.locator("tr.review-row")).to_have_count(3)

    page.get_by_label("Agent").select_option(label="Critic1")
    page.wait_for_url("**/trust/review/overrides/?agent=*")
    expect(page.locator("tr.review-row")).to_have_count(2)
    page.get_by_label("Decided by").fill("human:sam")
    page.get_by_label("Round").fill("round-9")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url("**round=round-9*")
    expect(page.locator("tr.review-row")).to_have_count(1)
    expect(page.locator(f"#override-{third.pk}")).to_be_visible()
    assert "decided_by=human%3Asam" in page.url
    _fits(page, width)
    screenshot(f"review-filtered-{width}", doc=width == 1366 and "#review-list")

    page.get_by_label("Status").select_option("any")
    page.wait_for_url("**status=any*")
    page.go_back()
    page.wait_for_url(lambda url: "status=any" not in url and "round=round-9" in url)
    expect(page.get_by_label("Round")).to_have_value("round-9")
    expect(page.get_by_label("Status")).to_have_value("waiting")
    page.go_back()
    page.go_back()
    page.wait_for_url(lambda url: url.endswith("/trust/review/overrides/"))
    expect(page.locator("tr.review-row")).to_have_count(3)

    # The detail view keeps the filters: next and previous stay among Critic1's overrides.
    page.goto(f"/trust/review/overrides/?agent={first.agent_id}")
    page.locator(f"#override-{first.pk} .open-link").click()
    expect(page.locator("#review-item .item-nav")).to_contain_text("1 of 2 waiting")
    page.keyboard.press("n")
    page.wait_for_url(f"**/trust/review/overrides/{third.pk}/?agent={first.agent_id}")


@pytest.mark.parametrize("width", WIDTHS)
def test_history_pages_beyond_seven_days(page_as, tenant, make_agent, screenshot, width):
    agent = make_agent(tenant, name="Critic1")
    old = [
        _log(
            agent,
            hours_ago=24 * (8 + day),
            output=f"Output {day}",
            decision=f"Decision {day}",
            by="human:sam",
            round_id=f"round-{day}",
        )
        for day in range(25)
    ]
    page = page_as(Role.REVIEWER)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/trust/review/")
    page.get_by_role("link", name="every override, all time").click()
    expect(page.locator("tr.review-row")).to_have_count(20)
    expect(page.locator(f"#override-{old[0].pk}")).to_be_visible()  # newest first
    page.get_by_role("link", name="Next").click()
    page.wait_for_url("**page=2*")
    expect(page.locator("tr.review-row")).to_have_count(5)
    expect(page.locator(f"#override-{old[-1].pk}")).to_be_visible()
    expect(page.locator(".pager")).to_contain_text("21\N{EN DASH}25 of 25")
    _fits(page, width)
    page.go_back()
    page.wait_for_url(lambda url: "page=2" not in url)
    expect(page.locator(f"#override-{old[0].pk}")).to_be_visible()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_reviewer_confirms_several_overrides_at_once(page_as, waiting, screenshot, width):
    first, second, third = waiting
    page = page_as(Role.REVIEWER, username="ada")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/trust/review/overrides/")

    page.get_by_label(f"Select override {first.pk} of Critic1 to confirm").check()
    page.get_by_label(f"Select override {third.pk} of Critic1 to confirm").check()
    page.get_by_role("button", name="Confirm selected").click()
    expect(page.locator("#bulk-status")).to_contain_text(
        f"Confirmed 2 overrides (#{first.pk}, #{third.pk})"
    )
    expect(page.locator(f"#override-{first.pk}.review-row--confirmed")).to_be_visible()
    expect(page.locator(f"#override-{third.pk}.review-row--confirmed")).to_be_visible()
    expect(page.locator(f"#override-{second.pk}.review-row--confirmed")).to_have_count(0)
    confirmed = Event.objects.filter(kind="override.confirmed", actor="human:ada")
    assert sorted(e.payload["override_id"] for e in confirmed) == [first.pk, third.pk]
    _fits(page, width)
    screenshot(f"review-bulk-confirmed-{width}", doc=width == 1366 and "#review-list")

    # The queue's waiting section confirms the same way; "select all" ticks what is left.
    page.goto("/trust/review/")
    page.get_by_label("Select every waiting override on this page").check()
    page.get_by_role("button", name="Confirm selected").click()
    expect(page.locator("#bulk-status")).to_contain_text(f"Confirmed 1 override (#{second.pk})")
    expect(page.locator(f"#override-{second.pk}.review-row--confirmed")).to_be_visible()
    _fits(page, width)
