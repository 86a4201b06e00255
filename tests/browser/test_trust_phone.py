"""The trust pages on a laptop (1,366 px) and a phone (390 px), issue 20: no page wider than the
screen, the review queue as cards whose buttons are all on screen."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.models import Role
from tests.browser.test_trust_pages import critic  # noqa: F401  (a fixture)
from tests.trust.governance_rows import flag_row, proposal_row
from trust.rounds.models import Override

WIDTHS = [1366, 390]


def overflow(page: Any) -> dict[str, int]:
    return page.evaluate(
        "() => ({scroll: document.documentElement.scrollWidth, inner: window.innerWidth})"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_no_trust_page_is_wider_than_the_screen(page_as, critic, tenant, width, screenshot):  # noqa: F811
    flag_row(critic)
    proposal_row(tenant)
    page = page_as(Role.ADMIN, username="root")
    page.set_viewport_size({"width": width, "height": 844})
    for name, url in [
        ("overview", "/trust/"),
        ("agent", f"/trust/agents/{critic.pk}/"),
        ("review-queue", "/trust/review/"),
    ]:
        page.goto(url)
        page.wait_for_load_state("load")
        sizes = overflow(page)
        assert sizes["scroll"] <= sizes["inner"], (url, sizes)
        screenshot(f"trust-{name}-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_review_queue_keeps_every_button_on_screen(page_as, critic, tenant, width):  # noqa: F811
    flag = flag_row(critic)
    proposal = proposal_row(tenant)
    waiting = Override.objects.get(agent=critic, round_id="round-7")
    page = page_as(Role.ADMIN, username="root")
    page.set_viewport_size({"width": width, "height": 844})
    page.goto("/trust/review/")

    row = page.locator(f"#override-{waiting.pk}")
    display = row.evaluate("(row) => getComputedStyle(row).display")
    # A card on a phone, a table row on a laptop.
    assert display == ("block" if width == 390 else "table-row")
    buttons = page.locator(
        f"#override-{waiting.pk} button, #flag-{flag.pk} button, #proposal-{proposal.pk} button"
    )
    assert buttons.count() == 6  # regret, confirm; clear, escalate; accept, reject
    for index in range(buttons.count()):
        box = buttons.nth(index).bounding_box()
        assert box is not None
        assert box["x"] >= 0, (index, box)
        assert box["x"] + box["width"] <= width, (index, box)

    row.get_by_role("button", name="Confirm").click()
    page.wait_for_selector(f"#override-{waiting.pk}.review-row--confirmed")
    assert overflow(page)["scroll"] <= width
