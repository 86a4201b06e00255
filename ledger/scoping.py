"""Tenant scoping for every API view: the one place that decides which rows a caller can see.

Every API viewset derives from ``TenantScopedViewSet``. Its ``get_queryset`` narrows the model's
rows to the caller's tenant before any lookup, so an id from another tenant is simply not found
(404, exactly like an id that does not exist) and no view filters by tenant by hand.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import viewsets

from ledger.auth import ApiPrincipal
from ledger.models import Role, Tenant


class TenantScopedViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    read_role: str = Role.AGENT
    write_role: str = Role.ADMIN
    role_by_action: dict[str, str] = {}

    @property
    def principal(self) -> ApiPrincipal:
        principal = self.request.user
        assert isinstance(principal, ApiPrincipal)  # guaranteed by the permission class
        return principal

    @property
    def tenant(self) -> Tenant:
        return self.principal.tenant

    def get_queryset(self) -> QuerySet[Any]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no caller
            return super().get_queryset().none()
        return self.scope_queryset(super().get_queryset().filter(tenant=self.tenant))

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Narrow further within the tenant (e.g. to an agent-scoped key's own rows)."""
        return queryset

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        if isinstance(self.request.user, ApiPrincipal):
            context["tenant"] = self.tenant
        return context
