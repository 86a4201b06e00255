"""Reads of people's seats."""

from __future__ import annotations

from django.db.models import QuerySet

from ledger.models import Membership, Tenant

# A tenant's people fit one page; beyond this the page says how many are not shown.
PEOPLE_SHOWN = 500


def tenant_memberships(*, tenant: Tenant) -> QuerySet[Membership]:
    """The tenant's seats with their people, admins first, then by username."""
    return (
        Membership.objects.for_tenant(tenant)
        .select_related("user")
        .order_by("role", "user__username")  # "admin" sorts before "reviewer"
    )
