"""Rate limits in Redis: API requests per key, and failed sign-ins (policy below).

Fixed windows: one counter per subject and window (``INCR`` plus ``EXPIRE`` in one round trip),
so every web process shares the count and a restart of the web processes forgets nothing. A fixed
window lets a burst of up to twice the limit straddle a boundary; that is accepted for a limit
whose job is to stop runaway agents and password guessing, not to shape traffic precisely.

When Redis is down the check raises ``redis.ConnectionError``; the outage middleware turns that
into 503 like any other dependency failure, so limits are never silently switched off.
"""

from __future__ import annotations

import hashlib
import ipaddress
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, wraps
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponseBase
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


# --- Sign-in ---------------------------------------------------------------------------------
#
# The policy, the same for /login/ and /admin/login/ (both go through ``sign_in_limited``):
#
# - A username is locked after LOGIN_RATE_LIMIT failures in a window, wherever they came from:
#   guessing one account's password stops there, from one address or from thousands.
# - An address that produced LOGIN_ADDRESS_RATE_LIMIT failures in a window (spraying passwords
#   over many usernames) is locked for every username that failed from it in that window.
# - Anything else is checked. So the right password of someone who has not failed is never
#   refused because others failed from the same address: a NAT, an office, or a proxy when
#   TRUSTED_PROXY_COUNT is not set. From one address an attacker gets LOGIN_ADDRESS_RATE_LIMIT
#   guesses, then one per username not yet tried, per window; and each username at most
#   LOGIN_RATE_LIMIT in all.
#
# A refused attempt is not checked and not counted. Failures are counted where Django reports
# them (the ``user_login_failed`` signal that ``authenticate`` sends for every wrong password),
# so no sign-in form can forget to count.


def client_address(request: HttpRequest) -> str:
    """The address sign-in limits count against.

    ``REMOTE_ADDR``, unless ``TRUSTED_PROXY_COUNT`` says that many proxies of ours stand in front
    of the app, each appending the address it got the request from to ``X-Forwarded-For``. Then
    the client is the entry the outermost of them appended, the ``TRUSTED_PROXY_COUNT``-th from
    the right; entries left of it came from the client, so sending the header picks nothing. A
    header with fewer entries than that did not pass all our proxies: ``REMOTE_ADDR`` again.
    IPv6 addresses count by their /64, the block one subscriber usually holds.
    """
    return _address_subject(client_ip(request))


def client_ip(request: HttpRequest) -> str:
    """The client's address as given (``client_address`` says which one), not yet grouped."""
    address = str(request.META.get("REMOTE_ADDR") or "")
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies > 0:
        forwarded = str(request.META.get("HTTP_X_FORWARDED_FOR") or "")
        entries = [entry.strip() for entry in forwarded.split(",")] if forwarded else []
        if len(entries) >= proxies:
            address = entries[-proxies]
    return address


def address_host(text: str) -> str:
    """The host of an address that may carry a port (``v4:port``, ``[v6]:port``)."""
    host = text.strip()
    if host.startswith("[") and "]" in host:  # [v6]:port
        host = host[1 : host.index("]")]
    elif host.count(":") == 1:  # v4:port
        host = host.split(":")[0]
    return host


def _address_subject(text: str) -> str:
    host = address_host(text)
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        return "unparsed:" + hashlib.sha256(text.encode()).hexdigest()[:32]
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{parsed}/64", strict=False))
    return str(parsed)


@dataclass(frozen=True)
class SignInAttempt:
    address: str
    # The submitted username as Django's form reads it (NFKC) and case-folded, hashed: one
    # counter for "Bob", "BOB" and "Bob" in fullwidth letters, and a fixed-size Redis key.
    username: str

    @classmethod
    def of(cls, request: HttpRequest) -> SignInAttempt:
        raw = str(request.POST.get("username", ""))
        folded = unicodedata.normalize("NFKC", raw).casefold().strip()
        username = hashlib.sha256(folded.encode("utf-8", "replace")).hexdigest()[:32]
        return cls(address=client_address(request), username=username if folded else "")

    @property
    def pair(self) -> str:
        return f"{self.address}|{self.username}"


def _sign_in_window(scope: str, subject: str, limit: int) -> WindowCount:
    return window_peek(
        scope=scope,
        subject=subject,
        limit=limit,
        window_seconds=settings.LOGIN_RATE_LIMIT_WINDOW_SECONDS,
    )


def sign_in_refusal(attempt: SignInAttempt) -> int | None:
    """Seconds until ``attempt`` may be checked, or None when it may be checked now."""
    if settings.LOGIN_RATE_LIMIT <= 0 or not attempt.username:
        return None
    username = _sign_in_window("login-username", attempt.username, settings.LOGIN_RATE_LIMIT)
    if username.count >= settings.LOGIN_RATE_LIMIT:
        return username.retry_after_seconds
    address_limit = settings.LOGIN_ADDRESS_RATE_LIMIT
    if address_limit > 0:
        address = _sign_in_window("login-address", attempt.address, address_limit)
        if address.count >= address_limit:
            pair = _sign_in_window("login-pair", attempt.pair, address_limit)
            if pair.count > 0:
                return pair.retry_after_seconds
    return None


def sign_in_failure_record(attempt: SignInAttempt) -> None:
    if settings.LOGIN_RATE_LIMIT <= 0 or not attempt.username:
        return
    for scope, subject in (
        ("login-username", attempt.username),
        ("login-address", attempt.address),
        ("login-pair", attempt.pair),
    ):
        window_hit(
            scope=scope,
            subject=subject,
            limit=settings.LOGIN_RATE_LIMIT,
            window_seconds=settings.LOGIN_RATE_LIMIT_WINDOW_SECONDS,
        )


@receiver(user_login_failed, dispatch_uid="config.ratelimit.sign_in_failed")
def _sign_in_failed(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    if request is not None and request.method == "POST":
        sign_in_failure_record(SignInAttempt.of(request))


View = Callable[..., HttpResponseBase]


def sign_in_limited(view: View) -> View:
    """``view`` (a sign-in form's view) behind the sign-in limits: a POST that the policy above
    refuses gets 429 with ``Retry-After``, and its password is not checked."""

    @wraps(view)
    def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST":
            retry_after = sign_in_refusal(SignInAttempt.of(request))
            if retry_after is not None:
                response = render(
                    request,
                    "registration/login_rate_limited.html",
                    {"retry_after_seconds": retry_after, "login_url": request.path},
                    status=429,
                )
                response["Retry-After"] = str(retry_after)
                return response
        return view(request, *args, **kwargs)

    return limited


def rate_limits_clear() -> None:
    """Forget every window (tests, and an operator unlocking an account after a lockout)."""
    client = redis_client()
    keys = list(client.scan_iter(match=f"{KEY_PREFIX}:*", count=1000))
    if keys:
        client.delete(*keys)
