"""The base of every API view: tenant scoping and ``Idempotency-Key`` handling.

Every API viewset derives from ``TenantScopedViewSet``. Its ``get_queryset`` narrows the model's
rows to the caller's tenant before any lookup, so an id from another tenant is simply not found
(404, exactly like an id that does not exist) and no view filters by tenant by hand.

Every request runs in one transaction, committed only if the answer is not a server error: a
request that answers 5xx, or raises, leaves none of its writes behind, whatever it wrote before it
failed. A POST with an ``Idempotency-Key`` keeps the key's record in the same transaction: the
answer is stored only if the request succeeded (2xx), and any other answer leaves nothing behind,
not even the key, so a corrected retry runs. Records belong to the API key that made the request:
a replay is only ever for that key.

Which actions an agent-scoped key may take is ``agent_bound_actions`` (``ledger.permissions``).
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseBase
from django.template.response import SimpleTemplateResponse
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import request_inputs_check
from ledger import idempotency
from ledger.auth import ApiPrincipal
from ledger.models import IdempotencyRecord, Role, Tenant


class TenantScopedViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    read_role: str = Role.AGENT
    write_role: str = Role.ADMIN
    role_by_action: dict[str, str] = {}
    # The actions that keep an agent-scoped key within its agent (its own rows and what the
    # tenant shares with every agent); every other action is tenant-wide and refuses such a key.
    agent_bound_actions: frozenset[str] = frozenset()

    _idempotency_record: IdempotencyRecord | None = None

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
            context["principal"] = self.principal
        return context

    # --- One transaction per request, and Idempotency-Key -------------------------------------

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with transaction.atomic():
            response = super().dispatch(request, *args, **kwargs)
            if isinstance(response, SimpleTemplateResponse):
                # Rendered here, so a body that fails to render is a failure of this transaction.
                response.render()
            record = self._idempotency_record
            if response.status_code >= 500:
                transaction.set_rollback(True)
            elif record is not None:
                if isinstance(response, Response) and 200 <= response.status_code < 300:
                    idempotency.idempotency_complete(
                        record=record, status_code=response.status_code, body=response.data
                    )
                else:
                    # Refused requests keep nothing, not even the key: a corrected retry runs.
                    transaction.set_rollback(True)
        return response

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authentication and permissions first
        request_inputs_check(request)
        key = request.META.get(idempotency.HEADER)
        if request.method == "POST" and key is not None:
            self._idempotency_record = idempotency.idempotency_claim(
                api_key=self.principal.api_key,
                key=key,
                fingerprint=idempotency.request_fingerprint(
                    method=request.method, path=request.get_full_path(), body=request.body
                ),
            )

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, idempotency.IdempotentReplay):
            return Response(
                exc.record.response_body,
                status=exc.record.status_code,
                headers={"Idempotent-Replayed": "true"},
            )
        if isinstance(exc, DatabaseError):
            # The database refused a statement (answered 400 invalid_value, or 500): what the
            # request wrote before is not known to be whole, and PostgreSQL may have aborted the
            # transaction, so none of it is kept.
            transaction.set_rollback(True)
        return super().handle_exception(exc)
