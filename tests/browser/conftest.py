"""Browser tests: Playwright driving Debian's chromium against the real Django app.

Reusable by every dashboard's browser tests:

- ``live_server`` (pytest-django): the app in a thread on a free port, with its static files
  (ours and node_modules' Chart.js through the finders) served as in production by WhiteNoise.
  Tests using it run on ``transactional_db``, so rows they write are visible to the server.
- ``browser``: one headless chromium (``/usr/bin/chromium``, never a downloaded one) per run.
- ``page``: a fresh browser context and page per test; console errors and CSP violations fail
  the test at teardown (``page.console_errors`` lists them).
- ``page_as(role, username=...)``: a page signed in through the real login form as a person
  with ``role`` (``Role.REVIEWER`` or ``Role.ADMIN``) in the ``tenant`` fixture's tenant.
- ``screenshot(name)``: saves a full-page PNG of the current page to var/screenshots/<name>.png
  (the test artefacts; CI keeps var/). ``screenshot(name, doc=True)`` also writes what is on
  screen (the viewport, at device scale 1; or the element a selector ``doc="#id"`` names) to
  docs/img/<name>.png, the pictures docs/dashboards.md shows, when DOC_SCREENSHOTS=1 is set
  (``DOC_SCREENSHOTS=1 make test ARGS=tests/browser``); otherwise to var/screenshots/doc/, so an
  ordinary run leaves the checkout clean (the pictures hold times that change every run).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from ledger import services
from ledger.models import Role, Tenant

# Playwright's sync API keeps an event loop running in this thread, which makes Django refuse
# ORM calls from the test body ("async context"); the calls are in fact synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PASSWORD = "browser-test-password-1"
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
DOC_IMAGES = (
    Path(settings.BASE_DIR) / "docs" / "img"
    if os.environ.get("DOC_SCREENSHOTS") == "1"
    else SCREENSHOTS / "doc"
)
VIEWPORT = {"width": 1366, "height": 900}  # a laptop screen


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=live_server.url, viewport=VIEWPORT)
    context.set_default_timeout(10_000)
    page = context.new_page()
    errors: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":
            errors.append(f"{page.url}: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))
    page.console_errors = errors
    yield page
    context.close()
    # htmx logs a request it aborted (a newer one replaced it, or the element went away) as an
    # error, with the afterRequest that follows; that is htmx working as meant, not the page.
    if any("htmx:sendAbort" in e for e in errors):
        errors[:] = [e for e in errors if not re.search(r": htmx:(sendAbort|afterRequest)\b", e)]
    # A refused inline script or style, or a script error, is a broken page even if the test's
    # own checks passed.
    assert errors == [], f"browser console errors: {errors}"


@pytest.fixture
def page_as(page: Any, tenant: Tenant) -> Callable[..., Any]:
    """Sign a new person with ``role`` in ``tenant`` in through the login form; returns the page."""

    def sign_in(role: str = Role.REVIEWER, *, username: str | None = None) -> Any:
        name = username or f"{role}-person"
        user = get_user_model().objects.create_user(username=name, password=PASSWORD)
        services.membership_grant(tenant=tenant, user=user, role=role)
        return log_in(page, name)

    return sign_in


def log_in(page: Any, username: str) -> Any:
    """Sign ``username`` (password ``PASSWORD``) in through the login form; returns the page."""
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
    return page


@pytest.fixture
def screenshot(page: Any) -> Callable[[str], Path]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def save(name: str, *, doc: bool | str = False) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        # caret="initial": hiding the caret makes Playwright inject a <style>, which the CSP
        # refuses; the refusal reaches the console later and failed a test screenshotting midway.
        page.screenshot(path=str(path), full_page=True, caret="initial")
        if doc:
            # The viewport only, or the element ``doc`` names: a screen's worth at most.
            DOC_IMAGES.mkdir(parents=True, exist_ok=True)
            shot = page.locator(doc).first if isinstance(doc, str) else page
            shot.screenshot(path=str(DOC_IMAGES / f"{name}.png"), caret="initial", scale="css")
        return path

    return save
