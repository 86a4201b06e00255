"""The Content-Security-Policy in a real browser: pages render with nothing refused.

The ``page`` fixture fails a test on any console error, a CSP violation included.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_api_docs_render_under_their_policy(page, screenshot):
    response = page.goto("/api/docs/")

    assert "style-src 'self' 'unsafe-inline'" in response.headers["content-security-policy"]
    page.wait_for_selector(".swagger-ui .info .title")
    assert "Agent Memory API" in page.inner_text(".swagger-ui .info .title")
    page.wait_for_selector(".opblock-summary-path")  # the operations came from /api/schema/
    screenshot("api-docs")


def test_the_login_page_renders_under_the_strict_policy(page):
    response = page.goto("/login/")

    assert "style-src 'self';" in response.headers["content-security-policy"]
    assert page.is_visible("#id_username")
    # Our stylesheet was applied (a refused one leaves the browser's default font size).
    assert page.eval_on_selector("body", "e => getComputedStyle(e).margin") != "8px"
