"""A per-process cache of verified API keys: authentication without a database query per request.

An entry maps a key's hash to its row and its tenant's row, read from the database on a miss
(``ledger.selectors.api_key_by_hash``, which finds unrevoked keys only). It is used only while
the *key version* in Redis is the one read before that database read, and for at most
``API_KEY_CACHE_SECONDS``. Every change to an API key or a tenant (a revocation, a role changed
in the admin, a deletion, an agent's deletion that takes its keys along) sets a new version, once
before its transaction commits and once after, so each process's next request misses and reads
the database again. Each request reads the version (one Redis ``GET``):

- a revoked key stops working in every process as soon as the revocation commits. If Redis
  cannot take the first notice, the change fails (and rolls back) rather than linger; a failure of
  the second one, in the moment after the commit, can leave an entry read in between for at most
  ``API_KEY_CACHE_SECONDS``;
- the version is a random token, not a counter, and a Redis without one (restarted empty,
  flushed) is given a new one, so it never answers a version an entry was stored under again.

The agent of an agent-scoped key is not cached: its trust score and probation change with every
round, so it is read afresh (with its tenant and recall settings) on every request, as before.
Neither is a lookup that found nothing: a new key is never hidden by the cache.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from time import monotonic
from typing import Any

import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from ledger.models import Agent, ApiKey, Tenant
from ledger.selectors import api_key_by_hash

logger = logging.getLogger(__name__)

VERSION_KEY = "agent-memory:api-keys-version"
# More entries than this and the cache starts over (one entry per key in use).
MAX_ENTRIES = 10_000

_KEY_FIELDS = tuple(field.attname for field in ApiKey._meta.concrete_fields)
_TENANT_FIELDS = tuple(field.attname for field in Tenant._meta.concrete_fields)


@dataclass
class _Entry:
    version: bytes
    expires_at: float
    key_values: list[Any]
    tenant_values: list[Any]


_entries: dict[str, _Entry] = {}


def _redis() -> Any:
    from config.ratelimit import redis_client

    return redis_client()


def api_key_verified(key_hash: str) -> ApiKey | None:
    """The unrevoked key of this hash: from the cache when its entry is current, else from the
    database (and then kept). Without Redis the version cannot be read: the database answers,
    as it did before this cache, and nothing is kept."""
    if settings.API_KEY_CACHE_SECONDS <= 0:
        return api_key_by_hash(key_hash)
    try:
        version = _version()
    except redis.RedisError:
        return api_key_by_hash(key_hash)
    api_key = _cached(key_hash, version)
    if api_key is None:
        api_key = api_key_by_hash(key_hash)
        if api_key is not None:
            _remember(api_key, version)
    return api_key


def _version() -> bytes:
    """The current version; a Redis without one (started empty, flushed) gets a new one, so an
    entry kept before that never matches again."""
    client = _redis()
    version: bytes | None = client.get(VERSION_KEY)
    if version is None:
        client.set(VERSION_KEY, uuid.uuid4().hex.encode(), nx=True)
        version = client.get(VERSION_KEY)
    return version or b""


def _cached(key_hash: str, version: bytes) -> ApiKey | None:
    """The key of this hash as verified under ``version``, as fresh instances, or None."""
    entry = _entries.get(key_hash)
    if entry is None:
        return None
    if entry.version != version or entry.expires_at <= monotonic():
        _entries.pop(key_hash, None)
        return None
    api_key = ApiKey.from_db(DEFAULT_DB_ALIAS, _KEY_FIELDS, entry.key_values)
    api_key.tenant = Tenant.from_db(DEFAULT_DB_ALIAS, _TENANT_FIELDS, entry.tenant_values)
    if api_key.agent_id is not None:
        agent = (
            Agent.objects.select_related("tenant__recall_settings")
            .filter(pk=api_key.agent_id)
            .first()
        )
        if agent is None:  # deleted in between: its keys went with it
            _entries.pop(key_hash, None)
            return None
        api_key.agent = agent
    return api_key


def _remember(api_key: ApiKey, version: bytes) -> None:
    """Keep a key found in the database under the version read before it was read."""
    if len(_entries) >= MAX_ENTRIES:
        _entries.clear()
    _entries[api_key.key_hash] = _Entry(
        version=version,
        expires_at=monotonic() + settings.API_KEY_CACHE_SECONDS,
        key_values=[getattr(api_key, name) for name in _KEY_FIELDS],
        tenant_values=[getattr(api_key.tenant, name) for name in _TENANT_FIELDS],
    )


def api_key_used(api_key: ApiKey) -> None:
    """The key's last use was just recorded (``api_key_mark_used``): its entry says so too, so
    the next requests of this process do not try again within the resolution."""
    entry = _entries.get(api_key.key_hash)
    if entry is not None:
        entry.key_values[_KEY_FIELDS.index("last_used_at")] = api_key.last_used_at


def cache_clear() -> None:
    _entries.clear()


def _version_set() -> None:
    _redis().set(VERSION_KEY, uuid.uuid4().hex.encode())


def _version_set_after_commit() -> None:
    try:
        _version_set()
    except Exception:
        cache_clear()  # this process at least forgets; others within API_KEY_CACHE_SECONDS
        logger.exception("could not publish an API key change; caches expire within %s s",
                         settings.API_KEY_CACHE_SECONDS)  # fmt: skip


def api_keys_changed() -> None:
    """Call on every change to an API key or a tenant (not on their creation): every process
    reads keys from the database again. Raises when Redis cannot take it, so that the change
    fails instead of lingering in caches."""
    _version_set()
    cache_clear()
    transaction.on_commit(_version_set_after_commit)


@receiver(post_save, sender=ApiKey)
@receiver(post_save, sender=Tenant)
def _row_saved(sender: type[Any], instance: Any, created: bool, **kwargs: Any) -> None:
    if not created:
        api_keys_changed()


@receiver(post_delete, sender=ApiKey)
@receiver(post_delete, sender=Tenant)
def _row_deleted(sender: type[Any], instance: Any, **kwargs: Any) -> None:
    api_keys_changed()
