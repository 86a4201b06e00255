"""The one request path both clients share: URL and headers, retries with backoff, error mapping,
cursor pages. The operation methods (``_sync/``, ``_async/``) are generated from the
service's OpenAPI schema and only name the method, path, query and body of each call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar
from urllib.parse import parse_qs, quote, urlsplit

import httpx

from ledgered_memory.errors import TransportError, error_for

T = TypeVar("T")

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
API_PREFIX = "/api/v1"

# Answers that mean "nothing was done, try again later": 503 is the service's own answer while
# PostgreSQL or Redis is down; 502/504 come from a proxy in front of it; 429 is the rate limit.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Sent with every answer to a request that appended ledger events.
RECEIPT_HEADER = "Ledger-Receipt"
# The media type of JSON Lines answers (the export), decoded into one object per line.
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: attempt n waits up to ``backoff * 2**n`` seconds
    (capped at ``max_backoff``), or the server's ``Retry-After`` when it sends a longer one."""

    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        ceiling = min(self.max_backoff, self.backoff * (2**attempt))
        wait = random.uniform(ceiling / 2, ceiling)  # noqa: S311 (jitter, not a secret)
        if retry_after is not None:
            with contextlib.suppress(ValueError):  # an HTTP date: keep our own delay
                wait = max(wait, min(float(retry_after), self.max_backoff))
        return wait


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a cursor-paginated list; pass ``next_cursor`` as ``cursor`` for the next."""

    results: list[T]
    next_cursor: str | None = None
    previous_cursor: str | None = None


@dataclass(frozen=True)
class Call:
    """One API call as the generated methods describe it."""

    method: str
    path: str
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None
    idempotency_key: str | None = None


def segment(value: object) -> str:
    return quote(str(value), safe="")


def query(**params: Any) -> dict[str, Any]:
    """Query parameters without the ones left out; lists become comma-separated, booleans
    lowercase, as the service's filters read them."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, Mapping):  # a filter: JSON
            value = json.dumps(value)
        out[name] = value
    return out


def cursor_of(url: str | None) -> str | None:
    if not url:
        return None
    values = parse_qs(urlsplit(url).query).get("cursor")
    return values[0] if values else None


def page_of(body: Any) -> Page[Any]:
    return Page(
        results=list(body.get("results", [])),
        next_cursor=cursor_of(body.get("next")),
        previous_cursor=cursor_of(body.get("previous")),
    )


def _may_retry_transport_error(call: Call, exc: httpx.TransportError) -> bool:
    # A POST carries an Idempotency-Key, so resending it after any failure is safe; a GET reads.
    # PATCH, PUT and DELETE are resent only when the request certainly never reached the server.
    if call.method in ("GET", "POST"):
        return True
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)


class _Base:
    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.base_url = (base_url or os.environ.get("AGENT_MEMORY_URL") or DEFAULT_BASE_URL).rstrip(
            "/"
        )
        key = api_key if api_key is not None else os.environ.get("AGENT_MEMORY_API_KEY")
        if not key:
            raise ValueError("Pass api_key= or set AGENT_MEMORY_API_KEY.")
        # Kept so an adapter can open the other kind of client (sync/async) as the same caller.
        self._api_key = key
        self._headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json",
            "User-Agent": "ledgered-memory/0.1",
        }
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        # The Ledger-Receipt of the latest answer that carried one ("<tenant>:<seq>:<hash>"):
        # keep it, and check later with events_verify_receipt that the ledger still holds it.
        self.last_receipt: str | None = None

    def _prepare(self, call: Call) -> tuple[str, dict[str, str], bytes | None]:
        headers = dict(self._headers)
        content = None
        if call.body is not None:
            # Serialised once, so every retry sends the same bytes: the server fingerprints the
            # body together with the Idempotency-Key and refuses a key reused for other bytes.
            content = json.dumps(call.body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        if call.method == "POST":
            headers["Idempotency-Key"] = call.idempotency_key or str(uuid.uuid4())
        return API_PREFIX + call.path, headers, content

    def _decode(self, response: httpx.Response) -> Any:
        receipt = response.headers.get(RECEIPT_HEADER)
        if receipt is not None:
            self.last_receipt = receipt
        if response.status_code == 204 or not response.content:
            body: Any = None
        elif response.headers.get("Content-Type", "").startswith(NDJSON):
            body = [json.loads(line) for line in response.text.splitlines() if line.strip()]
        else:
            try:
                body = response.json()
            except ValueError:
                body = response.text
        if response.status_code >= 400:
            raise error_for(response.status_code, body)
        return body

    def _status_retry_delay(self, attempt: int, response: httpx.Response) -> float | None:
        """How long to wait before resending after this answer, or None to answer with it."""
        if response.status_code in RETRY_STATUSES and attempt < self.retry.retries:
            return self.retry.delay(attempt, response.headers.get("Retry-After"))
        return None

    def _transport_retry_delay(
        self, call: Call, path: str, attempt: int, exc: httpx.TransportError
    ) -> float:
        """How long to wait before resending after a transport failure; raises when not to."""
        if attempt >= self.retry.retries or not _may_retry_transport_error(call, exc):
            raise TransportError(f"{call.method} {path}: {exc!r}") from exc
        return self.retry.delay(attempt, None)


class SyncTransport(_Base):
    """The blocking request path; ``Client`` adds one method per API operation."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(base_url=base_url, api_key=api_key, timeout=timeout, retry=retry)
        self._http = http or httpx.Client(base_url=self.base_url, timeout=timeout)
        self._sleep = sleep or time.sleep

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, call: Call) -> Any:
        path, headers, content = self._prepare(call)
        for attempt in itertools.count():
            try:
                response = self._http.request(
                    call.method, path, params=dict(call.params), headers=headers, content=content
                )
            except httpx.TransportError as exc:
                self._sleep(self._transport_retry_delay(call, path, attempt, exc))
                continue
            wait = self._status_retry_delay(attempt, response)
            if wait is None:
                return self._decode(response)
            self._sleep(wait)
        raise AssertionError("unreachable")

    def paginate(self, fetch: Callable[[str | None], Page[T]]) -> Iterator[T]:
        cursor: str | None = None
        while True:
            page = fetch(cursor)
            yield from page.results
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


class AsyncTransport(_Base):
    """The asyncio request path; ``AsyncClient`` adds one coroutine per API operation."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(base_url=base_url, api_key=api_key, timeout=timeout, retry=retry)
        self._http = http or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)
        self._sleep = sleep or asyncio.sleep

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(self, call: Call) -> Any:
        path, headers, content = self._prepare(call)
        for attempt in itertools.count():
            try:
                response = await self._http.request(
                    call.method, path, params=dict(call.params), headers=headers, content=content
                )
            except httpx.TransportError as exc:
                await self._sleep(self._transport_retry_delay(call, path, attempt, exc))
                continue
            wait = self._status_retry_delay(attempt, response)
            if wait is None:
                return self._decode(response)
            await self._sleep(wait)
        raise AssertionError("unreachable")

    async def paginate(self, fetch: Callable[[str | None], Awaitable[Page[T]]]) -> AsyncIterator[T]:
        cursor: str | None = None
        while True:
            page = await fetch(cursor)
            for item in page.results:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor
