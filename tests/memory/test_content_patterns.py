"""The content store's ``pattern`` filter runs in time linear in the item, whatever the pattern.

Issue 18, item 7: it ran Python's backtracking ``re`` with no bound, and ``(a|a)*b`` over 24
characters took 5 s, each further character doubling it. ``config.patterns`` runs RE2 instead.
"""

from __future__ import annotations

import time

import pytest

from config.patterns import PATTERN_WORK_BUDGET, client_pattern_compile
from ledger.models import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(tenant, make_agent, api_as):
    return api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Creator1"))


def stored(client, content: str) -> str:
    response = client.post("/api/v1/content/items/", {"content": content}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def filtered(client, item: str, pattern: str):
    return client.get(
        f"/api/v1/content/items/{item}/", {"transform": "filtered", "pattern": pattern}
    )


# Each backtracks exponentially in Python's re over the line below.
CATASTROPHIC = ["(a|a)*b", "(a+)+b", "(a|aa)+b", "(.*a){12}b", "(?:a*)*b", "(a?){30}a{30}b"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_pattern_answers_at_once(client, pattern):
    item = stored(client, "x\n" + "a" * 5000 + "\n" + "a" * 40 + "b\n")

    started = time.monotonic()
    response = filtered(client, item, pattern)
    seconds = time.monotonic() - started

    assert response.status_code == 200, response.content
    assert response.json()["content"] == "a" * 40 + "b"
    assert seconds < 1.0


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        ("(?<=a)b", "(?<="),
        ("a(?=b)", "(?="),
        ("(a)\\1", "\\1"),
        ("(?P<x>a)(?P=x)", "(?P"),
        ("a{1001}", "{1001}"),
    ],
)
def test_a_pattern_re2_cannot_run_is_named_as_unsupported(client, pattern, construct):
    item = stored(client, "ab\n")

    response = filtered(client, item, pattern)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unsupported_pattern"
    assert error["details"]["construct"] == construct


def test_a_pattern_that_is_no_regex_stays_invalid(client):
    response = filtered(client, stored(client, "ab\n"), "(unclosed")

    assert response.json()["error"]["code"] == "invalid_pattern"


def test_a_pattern_too_costly_for_the_item_is_refused_before_it_runs(client):
    # a[ab]{1000}x defeats RE2's DFA: about 10 ns an instruction a byte, 2.5 s for 200 KB.
    item = stored(client, "ab" * 100_000)

    started = time.monotonic()
    costly = filtered(client, item, "a[ab]{1000}x")
    cheap = filtered(client, item, "ba")

    assert costly.status_code == 400
    assert costly.json()["error"]["code"] == "pattern_too_costly"
    assert time.monotonic() - started < 1.0
    assert cheap.status_code == 200


def test_the_budget_bounds_the_work_of_any_pattern_that_passes():
    regex = client_pattern_compile("a[ab]{1000}x", max_chars=500, text_bytes=90_000)

    assert regex.programsize * 90_000 <= PATTERN_WORK_BUDGET
    started = time.monotonic()
    assert regex.search("ab" * 45_000) is None
    assert time.monotonic() - started < 5.0  # the budget's worst case, on a busy machine
