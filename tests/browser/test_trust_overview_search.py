"""The trust overview's search box stays in step with its table (issue 20, item 10), at 1,366 px
and at 390 px: a sort right after typing keeps the query, and Back brings the box back."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from ledger.models import Role

WIDTHS = [1366, 390]


@pytest.fixture
def agents(tenant, make_agent):
    for name, role in [("Critic1", "critic"), ("Crafter3", "critic"), ("Builder2", "builder")]:
        make_agent(tenant, name=name, primary_role=role)


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlparse(url).query)


def _names(page) -> list[str]:
    return page.locator("#agent-table tbody th a").all_inner_texts()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_sort_right_after_a_search_keeps_the_query(page_as, agents, width, screenshot):
    page = page_as(Role.REVIEWER)
    page.set_viewport_size({"width": width, "height": 844})
    page.goto("/trust/")
    assert len(_names(page)) == 3

    # Sort before the search's 300 ms debounce has fired: the sort must carry the query.
    page.fill("#id_q", "cr")
    page.click("#agent-table a.sort-link:has-text('Agent')")
    page.wait_for_url(lambda url: _query(url).get("sort") == ["-name"])
    assert _query(page.url)["q"] == ["cr"]
    page.wait_for_function("() => document.querySelectorAll('#agent-table tbody tr').length === 2")
    page.wait_for_timeout(600)  # the debounced search, if it still fires, must not undo the sort
    assert _names(page) == ["Critic1", "Crafter3"]
    assert page.input_value("#id_q") == "cr"
    assert page.input_value("#sort-field") == "-name"
    screenshot(f"trust-overview-search-sorted-{width}")

    # A search after the sort keeps the sort.
    page.fill("#id_q", "r")
    page.wait_for_url(lambda url: _query(url).get("q") == ["r"])
    assert _query(page.url)["sort"] == ["-name"]
    page.wait_for_function("() => document.querySelectorAll('#agent-table tbody tr').length === 3")
    assert _names(page) == ["Critic1", "Crafter3", "Builder2"]

    # Back: the table and the box are the previous ones again.
    page.go_back()
    page.wait_for_url(lambda url: _query(url).get("q") == ["cr"])
    page.wait_for_function("() => document.querySelectorAll('#agent-table tbody tr').length === 2")
    assert page.input_value("#id_q") == "cr"
    assert page.input_value("#sort-field") == "-name"
    # The page still works after the restore: a sort keeps the restored query.
    page.click("#agent-table a.sort-link:has-text('Agent')")
    page.wait_for_url(lambda url: _query(url).get("sort") == ["name"])
    assert _query(page.url)["q"] == ["cr"]
    page.wait_for_function("() => document.querySelector('#agent-table tbody th a') !== null")
    assert _names(page) == ["Crafter3", "Critic1"]
