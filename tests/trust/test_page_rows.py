"""The review pages' rows print what the template filters printed before (trust.pages.rows)."""

from __future__ import annotations

import pytest
from django.template.defaultfilters import truncatechars
from django.urls import reverse

from trust.pages.rows import ROW_TEXT_CHARS, text_head, url_of_id


@pytest.mark.parametrize(
    "text",
    [
        "",
        "short",
        "x" * ROW_TEXT_CHARS,
        "x" * (ROW_TEXT_CHARS + 1),
        "the claim misses the source " * 6,
        "cafe\u0301 " * 40,  # combining accents count nothing
        "na\u00efve r\u00e9sum\u00e9 " * 12,
        "\u2126 ohm " * 30,  # NFC turns it into another character
    ],
)
def test_a_row_text_is_cut_as_truncatechars_cuts_it(text):
    assert text_head(text) == truncatechars(text, ROW_TEXT_CHARS)


@pytest.mark.parametrize("route", ["trust:agent", "trust:override_detail", "trust:override_revert"])
def test_a_row_url_is_the_reversed_route_of_its_id(route):
    url = url_of_id(route)

    assert [url(pk) for pk in (1, 42, 9_007_199_254_740_993)] == [
        reverse(route, args=[pk]) for pk in (1, 42, 9_007_199_254_740_993)
    ]
