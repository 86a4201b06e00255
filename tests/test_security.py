"""Hardening: rate limits, security headers, production settings, secrets kept out of logs."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client, override_settings

from config.security import CONTENT_SECURITY_POLICY, SecretRedactingFilter
from ledger.models import Role

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.django_db


# --- API rate limit -------------------------------------------------------------------------


@override_settings(API_RATE_LIMIT=3, API_RATE_LIMIT_WINDOW_SECONDS=60)
def test_an_api_key_over_its_limit_gets_429_with_retry_after(api_as, tenant):
    api = api_as(tenant)

    statuses = [api.get("/api/v1/agents/").status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]
    refused = api.get("/api/v1/agents/")
    assert refused.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 60


@override_settings(API_RATE_LIMIT=2, API_RATE_LIMIT_WINDOW_SECONDS=60)
def test_each_api_key_has_its_own_window(api_as, tenant):
    first, second = api_as(tenant), api_as(tenant)
    for _ in range(3):
        first.get("/api/v1/agents/")

    assert first.get("/api/v1/agents/").status_code == 429
    assert second.get("/api/v1/agents/").status_code == 200


@override_settings(API_RATE_LIMIT=2, API_RATE_LIMIT_WINDOW_SECONDS=60)
def test_a_refused_write_is_not_applied(api_as, tenant):
    api = api_as(tenant)
    api.get("/api/v1/agents/")
    api.get("/api/v1/agents/")

    response = api.post("/api/v1/agents/", {"name": "Late"}, format="json")

    assert response.status_code == 429
    names = [agent["name"] for agent in api_as(tenant).get("/api/v1/agents/").json()["results"]]
    assert "Late" not in names


@override_settings(API_RATE_LIMIT=0)
def test_a_limit_of_zero_switches_the_api_limit_off(api_as, tenant):
    api = api_as(tenant, role=Role.REVIEWER)

    assert {api.get("/api/v1/agents/").status_code for _ in range(5)} == {200}


# --- Login rate limit -----------------------------------------------------------------------


@pytest.fixture
def person(django_user_model):
    return django_user_model.objects.create_user(username="rita", password="correct horse 42")


@override_settings(LOGIN_RATE_LIMIT=3, LOGIN_RATE_LIMIT_WINDOW_SECONDS=300)
def test_sign_in_is_refused_after_repeated_failures_even_with_the_right_password(client, person):
    for _ in range(3):
        failed = client.post("/login/", {"username": "rita", "password": "guess"})
        assert failed.status_code == 200  # the form again, with its error

    refused = client.post("/login/", {"username": "rita", "password": "correct horse 42"})

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 300
    assert b"Too many sign-in attempts" in refused.content
    assert "_auth_user_id" not in client.session


@override_settings(LOGIN_RATE_LIMIT=3, LOGIN_RATE_LIMIT_WINDOW_SECONDS=300)
def test_the_username_is_limited_whatever_address_the_guesses_come_from(client, person):
    for number in range(3):
        client.post(
            "/login/", {"username": "RITA", "password": "guess"}, REMOTE_ADDR=f"10.0.0.{number}"
        )

    refused = client.post(
        "/login/", {"username": "rita", "password": "correct horse 42"}, REMOTE_ADDR="10.0.1.1"
    )

    assert refused.status_code == 429


@override_settings(LOGIN_RATE_LIMIT=3, LOGIN_RATE_LIMIT_WINDOW_SECONDS=300)
def test_successful_sign_ins_do_not_count(client, person):
    for _ in range(4):
        response = client.post("/login/", {"username": "rita", "password": "correct horse 42"})
        assert response.status_code == 302
        client.post("/logout/")


# --- Security headers -----------------------------------------------------------------------


def test_pages_and_api_answers_carry_the_content_security_policy(client, api_as, tenant):
    page = client.get("/login/")
    api = api_as(tenant).get("/api/v1/agents/")

    for response in (page, api):
        assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Referrer-Policy"] == "same-origin"
        assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY


def test_the_login_page_needs_no_inline_script_or_style(client):
    page = client.get("/login/").content.decode()

    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page), "inline <script>"
    assert "<style" not in page
    assert not re.search(r"\sstyle=", page)
    assert not re.search(r"\son[a-z]+=", page), "inline event handler"


def test_the_api_docs_run_their_script_from_a_file_and_relax_only_styles(client):
    response = client.get("/api/docs/")
    page = response.content.decode()

    policy = response["Content-Security-Policy"]
    assert "script-src 'self';" in policy
    assert "style-src 'self' 'unsafe-inline'" in policy
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page), "inline <script>"
    script = re.findall(r'<script src="([^"]+)"', page)[-1]
    started = client.get(script)
    assert started.status_code == 200
    assert b"SwaggerUIBundle" in started.content


def test_hsts_is_sent_over_https_when_configured(client):
    assert "Strict-Transport-Security" not in client.get("/login/", secure=True)

    # SecurityMiddleware reads its settings when it is built: a new client builds it anew.
    with override_settings(SECURE_HSTS_SECONDS=31536000, SECURE_HSTS_INCLUDE_SUBDOMAINS=True):
        response = Client().get("/login/", secure=True)

    assert response["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"


# --- Production settings --------------------------------------------------------------------

PRODUCTION_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": "x7Q2-production-like-secret-key-for-the-deploy-check-0123456789abcdefXYZ",
    "ALLOWED_HOSTS": "memory.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://memory.example.com",
    "SECURE_COOKIES": "true",
    "SECURE_SSL_REDIRECT": "true",
    "TRUST_X_FORWARDED_PROTO": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}


def deploy_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in PRODUCTION_ENV and not key.startswith("DJANGO_")
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_production_settings_pass_the_deploy_check():
    result = deploy_check(PRODUCTION_ENV)

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_deploy_check_catches_cookies_sent_over_plain_http():
    result = deploy_check({**PRODUCTION_ENV, "SECURE_COOKIES": "false"})

    assert result.returncode != 0
    assert "security.W012" in result.stderr + result.stdout


# --- Secrets in logs ------------------------------------------------------------------------


def test_secrets_never_reach_the_log_output():
    console = next(
        handler
        for handler in logging.getLogger().handlers
        if any(isinstance(f, SecretRedactingFilter) for f in handler.filters)
    )
    output = io.StringIO()
    previous = console.setStream(output)  # type: ignore[attr-defined]
    try:
        logger = logging.getLogger("django.request")
        logger.warning(
            "Unauthorized: key %s, headers %s",
            "amk_live_s3cr3tKEYvalue",
            {"HTTP_AUTHORIZATION": "Bearer amk_other_s3cr3t", "HTTP_ACCEPT": "json"},
        )
        try:
            raise ValueError("login failed for password=hunter2-secret&username=rita")
        except ValueError:
            logger.exception("Internal Server Error: /login/ Authorization: Bearer tok3n-s3cr3t")
    finally:
        console.setStream(previous)  # type: ignore[attr-defined]

    text = output.getvalue()
    for secret in ("s3cr3tKEYvalue", "amk_other", "hunter2", "tok3n-s3cr3t"):
        assert secret not in text
    assert "[redacted]" in text
    assert "username=rita" in text  # what is not secret stays readable
    assert "ValueError" in text
