"""Reads that tolerate replication lag go to read replicas; everything else to the primary.

With ``DATABASE_REPLICA_URLS`` set, settings add one database alias per replica (``replica_1``,
``replica_2``...). A read goes to a replica only when it is marked lag-tolerant, with the
``lag_tolerant`` context manager or decorator (search, recall, the dashboards' lists), and then
only when none of these holds:

- the caller wrote recently (**read-your-writes**): a request that appended to the ledger reads
  from the primary for the rest of the request, and its caller reads from the primary for
  ``REPLICA_STICKY_SECONDS`` afterwards. Every change the service makes appends its event
  through the ORM (``events_append``), so the append is the one signal that covers every write,
  raw SQL or not; other ORM writes are bookkeeping (an ``Idempotency-Key``'s record, an API
  key's last use, a session, a tenant's default recall settings made on first read) and must
  not pin: every search sent with an ``Idempotency-Key`` would.
  The caller is the API key (a hash of the ``Authorization`` header) or the browser session (a
  hash of its cookie); the mark is a key in Redis with that lifetime, so it holds whichever web
  process or server answers next. Redis rather than a signed cookie, because agents call the
  API without cookies;
- outside a request (a Celery task, a command), the primary is inside a transaction: the block
  may read what the transaction wrote. A request's own transaction (``TenantScopedViewSet``
  wraps every API request in one) does not count until the request wrote;
- the replica cannot be reached: the primary answers instead (and a warning is logged).

A block picks one replica on entry and keeps it, so one search never mixes two replicas' views.
Raw SQL in a lag-tolerant read takes its cursor from ``read_connection`` (which follows the
block) instead of ``django.db.connection`` (always the primary); ORM queries follow the block
through ``ReplicaRouter``. Writes always go to the primary; migrations run on it only.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.http import HttpRequest, HttpResponseBase

logger = logging.getLogger(__name__)

REPLICA_ALIAS_PREFIX = "replica_"
PIN_KEY_PREFIX = "agent-memory:read-your-writes"
# The write that every change makes (the ledger is the source of truth).
CHANGE_MODEL = "ledger.event"


def replica_aliases() -> list[str]:
    return [alias for alias in connections.settings if alias.startswith(REPLICA_ALIAS_PREFIX)]


@dataclass
class Caller:
    """Who the current request is, for read-your-writes; ``pinned`` is read from Redis once."""

    subject: str
    wrote: bool = False
    pinned: bool | None = None

    @property
    def pin_key(self) -> str:
        return f"{PIN_KEY_PREFIX}:{self.subject}"


_caller: ContextVar[Caller | None] = ContextVar("read_your_writes_caller", default=None)
# The alias the innermost lag-tolerant block chose; None outside every block.
_block_alias: ContextVar[str | None] = ContextVar("lag_tolerant_alias", default=None)


def _redis() -> Any:
    from config.ratelimit import redis_client

    return redis_client()


def _caller_pinned(caller: Caller | None) -> bool:
    if caller is None:
        return False
    if caller.wrote:
        return True
    if caller.pinned is None:
        try:
            caller.pinned = bool(_redis().exists(caller.pin_key))
        except Exception:  # Redis down: the primary is always right, only slower
            logger.warning("read-your-writes check failed; reading from the primary")
            caller.pinned = True
    return caller.pinned


def _reachable(alias: str) -> bool:
    try:
        connections[alias].ensure_connection()
    except DatabaseError:
        logger.warning("replica %s unreachable; reading from the primary", alias, exc_info=True)
        return False
    return True


def lag_tolerant_alias() -> str:
    """Where a lag-tolerant read starting now goes (the rules in the module's docstring)."""
    replicas = replica_aliases()
    if not replicas:
        return DEFAULT_DB_ALIAS
    caller = _caller.get()
    # A request's transaction (every API request has one) only matters once the request wrote,
    # which _caller_pinned knows; a task's or a command's may have written by any means.
    if caller is None and connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    if _caller_pinned(caller):
        return DEFAULT_DB_ALIAS
    alias = random.choice(replicas)  # noqa: S311 (spreading load, not a secret)
    return alias if _reachable(alias) else DEFAULT_DB_ALIAS


@contextlib.contextmanager
def lag_tolerant() -> Iterator[str]:
    """Mark the reads of the block (or decorated function) as tolerating replication lag.

    Nested blocks keep the outer one's choice. Yields the alias chosen.
    """
    alias = _block_alias.get() or lag_tolerant_alias()
    token = _block_alias.set(alias)
    try:
        yield alias
    finally:
        _block_alias.reset(token)


def read_alias() -> str:
    """The alias of the current lag-tolerant block, else the primary's."""
    return _block_alias.get() or DEFAULT_DB_ALIAS


class _ReadConnection:
    """``django.db.connection`` for raw SQL that follows the current lag-tolerant block."""

    def __getattr__(self, name: str) -> Any:
        return getattr(connections[read_alias()], name)


read_connection: Any = _ReadConnection()


class ReplicaRouter:
    """ORM reads inside a lag-tolerant block go where the block chose; writes to the primary."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return _block_alias.get()

    def db_for_write(self, model: type[Any], **hints: Any) -> str:
        caller = _caller.get()
        if caller is not None and model._meta.label_lower == CHANGE_MODEL:
            caller.wrote = True
        return DEFAULT_DB_ALIAS

    def allow_relation(self, first: Any, second: Any, **hints: Any) -> bool:
        return True  # replicas hold the primary's rows

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == DEFAULT_DB_ALIAS


def caller_subject(request: HttpRequest) -> str | None:
    """A stable, secret-free name for the request's caller: its API key or its session."""
    credential = request.headers.get("Authorization") or request.COOKIES.get(
        settings.SESSION_COOKIE_NAME
    )
    if not credential:
        return None
    return hashlib.sha256(credential.encode()).hexdigest()


class ReadYourWritesMiddleware:
    """Knows the caller during the request; marks it in Redis when the request wrote.

    Without replicas it does nothing.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not replica_aliases():
            return self.get_response(request)
        subject = caller_subject(request)
        caller = Caller(subject) if subject else None
        token = _caller.set(caller)
        try:
            response = self.get_response(request)
        finally:
            _caller.reset(token)
        if caller is not None and caller.wrote:
            try:
                _redis().set(caller.pin_key, 1, ex=settings.REPLICA_STICKY_SECONDS)
            except Exception:  # the write is done; a lost mark costs at most a stale read
                logger.warning("could not mark the caller for read-your-writes", exc_info=True)
        return response
