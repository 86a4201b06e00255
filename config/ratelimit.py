"""Rate limits in Redis: API requests per key and failed sign-ins per address and per username.

Fixed windows: one counter per subject and window (``INCR`` plus ``EXPIRE`` in one round trip),
so every web process shares the count and a restart of the web processes forgets nothing. A fixed
window lets a burst of up to twice the limit straddle a boundary; that is accepted for a limit
whose job is to stop runaway agents and password guessing, not to shape traffic precisely.

When Redis is down the check raises ``redis.ConnectionError``; the outage middleware turns that
into 503 like any other dependency failure, so limits are never silently switched off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

KEY_PREFIX = "agent-memory:ratelimit"


@dataclass(frozen=True)
class WindowCount:
    count: int
    limit: int
    retry_after_seconds: int

    @property
    def exceeded(self) -> bool:
        return self.limit > 0 and self.count > self.limit


@cache
def redis_client() -> redis.Redis:
    # Short timeouts and one quick retry: a request must not hang on a dead Redis, and a
    # connection broken by a Redis restart is re-opened on the next call.
    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.05), 1),
        health_check_interval=30,
    )


def window_hit(*, scope: str, subject: str, limit: int, window_seconds: int) -> WindowCount:
    """Count one hit of ``subject`` in the current window and return the count so far."""
    now = time.time()
    window = int(now // window_seconds)
    key = f"{KEY_PREFIX}:{scope}:{subject}:{window}"
    pipe = redis_client().pipeline(transaction=True)
    pipe.incr(key)
    pipe.expire(key, window_seconds + 1)
    count, _ = pipe.execute()
    retry_after = max(1, int((window + 1) * window_seconds - now + 0.999))
    return WindowCount(count=int(count), limit=limit, retry_after_seconds=retry_after)


def window_peek(*, scope: str, subject: str, limit: int, window_seconds: int) -> WindowCount:
    """The current window's count without adding to it."""
    now = time.time()
    window = int(now // window_seconds)
    raw = redis_client().get(f"{KEY_PREFIX}:{scope}:{subject}:{window}")
    retry_after = max(1, int((window + 1) * window_seconds - now + 0.999))
    return WindowCount(count=int(raw or 0), limit=limit, retry_after_seconds=retry_after)


class ApiKeyRateThrottle(BaseThrottle):
    """``API_RATE_LIMIT`` requests per API key per ``API_RATE_LIMIT_WINDOW_SECONDS`` (0: off).

    Runs after authentication, so the subject is the key's id (never the secret). DRF answers a
    refusal with 429, ``Retry-After`` and our ``rate_limited`` error code.
    """

    def __init__(self) -> None:
        self._retry_after: int | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        limit = settings.API_RATE_LIMIT
        api_key = getattr(request.auth, "pk", None)
        if limit <= 0 or api_key is None:
            return True
        hit = window_hit(
            scope="api-key",
            subject=str(api_key),
            limit=limit,
            window_seconds=settings.API_RATE_LIMIT_WINDOW_SECONDS,
        )
        self._retry_after = hit.retry_after_seconds
        return not hit.exceeded

    def wait(self) -> float | None:
        return None if self._retry_after is None else float(self._retry_after)


def client_address(request: HttpRequest) -> str:
    # REMOTE_ADDR only: X-Forwarded-For is client-controlled unless a proxy rewrites it, and a
    # limit an attacker can dodge by changing a header protects nothing.
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def _login_subjects(request: HttpRequest) -> list[tuple[str, str]]:
    username = str(request.POST.get("username", "")).strip().lower()[:150]
    subjects = [("login-address", client_address(request))]
    if username:
        subjects.append(("login-username", username))
    return subjects


class RateLimitedLoginView(auth_views.LoginView):
    """Django's login view, refusing sign-in attempts after ``LOGIN_RATE_LIMIT`` failures.

    Failures are counted per client address and per username, so neither guessing many passwords
    for one account from many addresses nor many accounts from one address gets far. A refused
    attempt is not checked at all (the right password does not help until the window ends).
    """

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        limit = settings.LOGIN_RATE_LIMIT
        if limit > 0:
            for scope, subject in _login_subjects(request):
                seen = window_peek(
                    scope=scope,
                    subject=subject,
                    limit=limit,
                    window_seconds=settings.LOGIN_RATE_LIMIT_WINDOW_SECONDS,
                )
                if seen.count >= limit:
                    response = render(
                        request,
                        "registration/login_rate_limited.html",
                        {"retry_after_seconds": seen.retry_after_seconds},
                        status=429,
                    )
                    response["Retry-After"] = str(seen.retry_after_seconds)
                    return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        if settings.LOGIN_RATE_LIMIT > 0:
            for scope, subject in _login_subjects(self.request):
                window_hit(
                    scope=scope,
                    subject=subject,
                    limit=settings.LOGIN_RATE_LIMIT,
                    window_seconds=settings.LOGIN_RATE_LIMIT_WINDOW_SECONDS,
                )
        return super().form_invalid(form)


def rate_limits_clear() -> None:
    """Forget every window (tests, and an operator unlocking an account after a lockout)."""
    client = redis_client()
    keys = list(client.scan_iter(match=f"{KEY_PREFIX}:*", count=1000))
    if keys:
        client.delete(*keys)
