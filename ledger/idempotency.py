"""``Idempotency-Key`` on POST: a retried request returns the original answer and writes nothing.

Keys belong to the API key that sent them (the principal) and are kept for
``IDEMPOTENCY_RETENTION_HOURS``. A replay is only ever for that principal: the same key sent with
another API key, even one of the same agent or a rotated one, is another request and runs afresh
(neither replayed nor refused, so it learns nothing of the first). A key reused by its own
principal with a different request (method, path or body) is refused with 422 rather than
silently replayed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import connection
from django.utils import timezone
from rest_framework import status
from rest_framework.utils import encoders

from config.api import ApiError
from ledger.models import ApiKey, IdempotencyRecord

HEADER = "HTTP_IDEMPOTENCY_KEY"
MAX_KEY_LENGTH = 255

CLAIM_SQL = """
INSERT INTO ledger_idempotencyrecord (tenant_id, api_key_id, key, fingerprint, created_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (api_key_id, key) DO NOTHING
RETURNING id
"""
COMPLETE_SQL = """
UPDATE ledger_idempotencyrecord SET status_code = %s, response_body = %s::jsonb WHERE id = %s
"""


class IdempotentReplay(Exception):
    """Raised before a handler runs when the request was already answered."""

    def __init__(self, record: IdempotencyRecord) -> None:
        super().__init__(record.key)
        self.record = record


def request_fingerprint(*, method: str, path: str, body: bytes) -> str:
    digest = hashlib.sha256()
    for part in (method.encode(), b"\0", path.encode(), b"\0", body):
        digest.update(part)
    return digest.hexdigest()


def idempotency_claim(*, api_key: ApiKey, key: str, fingerprint: str) -> IdempotencyRecord:
    """Claim ``key`` for this request of ``api_key`` inside the caller's transaction.

    Returns the new, incomplete record when the request should run; raises ``IdempotentReplay``
    when an earlier request with the same key and body already completed.
    """
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ApiError(
            code="invalid_idempotency_key",
            message=f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} characters.",
        )
    # ON CONFLICT instead of catching the unique violation: no savepoint around the insert, so
    # two statements fewer on every POST with a key (and raw SQL: no ORM compiling it).
    with connection.cursor() as cursor:
        cursor.execute(CLAIM_SQL, [api_key.tenant_id, api_key.pk, key, fingerprint, timezone.now()])
        claimed = cursor.fetchone()
    if claimed is not None:
        return IdempotencyRecord(
            id=claimed[0], tenant_id=api_key.tenant_id, api_key=api_key, key=key,
            fingerprint=fingerprint,
        )  # fmt: skip
    # Another request of this API key holds or held the key. The insert above waited for it to
    # commit, so the row read here is complete.
    existing = IdempotencyRecord.objects.get(api_key=api_key, key=key)
    if existing.fingerprint != fingerprint:
        raise ApiError(
            code="idempotency_key_reused",
            message="This Idempotency-Key was already used for a different request.",
            status_code=status.HTTP_422_UNPROCESSABLE_ENTITY,
        )
    raise IdempotentReplay(existing)


def idempotency_complete(*, record: IdempotencyRecord, status_code: int, body: Any) -> None:
    # Stored as the renderer sends it: a view's response data may still hold datetimes, decimals
    # or UUIDs that only DRF's encoder turns into JSON (a search's hit details do).
    with connection.cursor() as cursor:
        cursor.execute(
            COMPLETE_SQL, [status_code, json.dumps(body, cls=encoders.JSONEncoder), record.pk]
        )
