"""Our own patterns over a client's text run in linear time (config.patterns.linear_compile).

Found while fixing the content store's ``pattern`` (issue 18, item 7): Python's backtracking
``re`` took seconds over hostile text on patterns we wrote ourselves. The memory policies' money
pattern took 4 s over "1," repeated 4,000 times, growing with the cube of the length (a memory
holds 100,000 characters: a POST could hold a worker for an hour); the HTML compactor's tag
patterns took 20 s over 20,000 "<style ".
"""

from __future__ import annotations

import time

import pytest

from memory.episodic.policies import memory_type_infer

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "content",
    ["1," * 20_000, "\n" * 40_000 + "x", ". " * 20_000 + "never", "$1" * 20_000],
    ids=["digits and commas", "newlines", "sentence ends", "dollars"],
)
def test_storing_a_memory_of_hostile_text_takes_no_time(api_as, tenant, make_agent, content):
    make_agent(tenant, name="alpha")
    client = api_as(tenant)

    started = time.monotonic()
    response = client.post(
        "/api/v1/memories/", {"agent": "alpha", "content": content}, format="json"
    )

    assert response.status_code == 201, response.content
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize(
    "page",
    ["<style " * 20_000, "<title>" * 20_000, "<link " * 20_000, "<" * 100_000],
    ids=["unclosed styles", "unclosed titles", "unclosed links", "angle brackets"],
)
def test_summarising_a_hostile_page_takes_no_time(api_as, tenant, make_agent, page):
    make_agent(tenant, name="alpha")
    client = api_as(tenant)
    stored = client.post(
        "/api/v1/content/items/",
        {"agent": "alpha", "content": "<html>" + page, "type": "web_content"},
        format="json",
    )

    started = time.monotonic()
    summary = client.get(f"/api/v1/content/items/{stored.json()['id']}/", {"transform": "summary"})

    assert summary.status_code == 200, summary.content
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize(
    ("content", "memory_type"),
    [
        ("Always deploy on Mondays.", "fact"),
        ("Never mind, it works.", "conversation"),
        ("OK. never mind. Always use UTC.", "fact"),
        ("Please remember this: the key is blue.", "explicit"),
        ("Done.\nRemember: the vault code changed.", "explicit"),
    ],
)
def test_the_rewritten_instruction_patterns_keep_their_meaning(content, memory_type):
    assert memory_type_infer(content=content, role="user", metadata={}) == memory_type
