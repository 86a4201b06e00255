"""A URL configuration for tests/ledger/test_request_transactions.py: the service's own URLs plus
one API view that writes through a real service and then fails in the way the request asks."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response

from config.urls import urlpatterns as service_urlpatterns
from ledger.models import Agent, Role
from ledger.scoping import TenantScopedViewSet
from ledger.services import agent_create


class WritesThenFailsViewSet(TenantScopedViewSet):
    queryset = Agent.objects.all()
    write_role = Role.ADMIN

    def create(self, request: Request) -> Response:
        agent_create(tenant=self.tenant, name="Written", actor=self.principal.actor)
        failure = request.data.get("failure")
        if failure == "exception":
            raise RuntimeError("a bug after the write")
        if failure == "database":
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 / 0")  # PostgreSQL refuses: DataError, answered 400
        if failure == "unrenderable":
            return Response({"agent": object()}, status=201)
        if failure == "server_error":
            return Response({"error": {"code": "x", "message": "x", "details": {}}}, status=503)
        return Response({"written": True}, status=201)


urlpatterns: list[Any] = [
    path("api/v1/test-writes/", WritesThenFailsViewSet.as_view({"post": "create"})),
    *service_urlpatterns,
]
