"""On-demand chain verification (writes): walk one tenant's chain now and record what it found.

The ledger page's "Verify now" (admins) and ``manage.py verify_ledger`` call this; the nightly
job keeps its own record in its ``JobRun``. The walk is ``event_chain_verify``, the same as the
API's ``GET /events/verify/``: synchronous, about 70,000 events a second (docs/ledger.md), so a
million-event chain answers in about 15 s.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from ledger.models import ChainVerification, Tenant
from ledger.selectors import ChainReport, event_chain_verify

# Older records are dropped as new ones come: the panel shows the latest only.
VERIFICATIONS_KEPT_DAYS = 90


def chain_verification_record(
    *, tenant: Tenant, report: ChainReport, source: str, checked_by: str, seconds: float
) -> ChainVerification:
    now = timezone.now()
    ChainVerification.objects.filter(
        tenant=tenant, checked_at__lt=now - timedelta(days=VERIFICATIONS_KEPT_DAYS)
    ).delete()
    return ChainVerification.objects.create(
        tenant=tenant,
        checked_at=now,
        source=source,
        checked_by=checked_by,
        ok=report.ok,
        events_checked=report.events_checked,
        head_seq=report.head_seq,
        broken_seq=report.first_broken_seq,
        code=report.code,
        reason=report.reason,
        duration_seconds=round(seconds, 3),
    )


def chain_verify_now(*, tenant: Tenant, source: str, checked_by: str) -> ChainVerification:
    """Walk the tenant's whole chain against its checkpoints and record the outcome."""
    clock = time.monotonic()
    report = event_chain_verify(tenant=tenant)
    return chain_verification_record(
        tenant=tenant,
        report=report,
        source=source,
        checked_by=checked_by,
        seconds=time.monotonic() - clock,
    )
