from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import IdempotencyRecord
from ledger.services import idempotency_records_expire

pytestmark = pytest.mark.django_db


def test_stored_answers_expire_after_the_retention_and_twice_changes_nothing(
    tenant, make_key, settings
):
    settings.IDEMPOTENCY_RETENTION_HOURS = 24
    api_key, _ = make_key(tenant)
    old = IdempotencyRecord.objects.create(
        tenant=tenant, api_key=api_key, key="old", fingerprint="x"
    )
    fresh = IdempotencyRecord.objects.create(
        tenant=tenant, api_key=api_key, key="fresh", fingerprint="y"
    )
    IdempotencyRecord.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(hours=25)
    )

    first = idempotency_records_expire()
    second = idempotency_records_expire()

    assert (first, second) == (1, 0)
    assert list(IdempotencyRecord.objects.values_list("pk", flat=True)) == [fresh.pk]
