"""REST endpoints of the ledger app: agents and API keys."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from ledger import services
from ledger.models import Agent, ApiKey, Role
from ledger.scoping import TenantScopedViewSet
from ledger.serializers import AgentSerializer, ApiKeyCreatedSerializer, ApiKeySerializer


@extend_schema_view(
    list=extend_schema(
        summary="List agents",
        parameters=[
            OpenApiParameter("name", str, description="Exact agent name"),
            OpenApiParameter("primary_role", str, description="Exact primary role"),
        ],
    ),
    create=extend_schema(summary="Register an agent (admin)"),
    retrieve=extend_schema(summary="Get an agent"),
    partial_update=extend_schema(summary="Change an agent (admin)"),
    update=extend_schema(summary="Replace an agent's editable fields (admin)"),
    destroy=extend_schema(summary="Delete an agent and its keys (admin)"),
)
class AgentViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet,
):
    queryset = Agent.objects.all()
    serializer_class = AgentSerializer

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        for param in ("name", "primary_role"):
            value = self.request.query_params.get(param)
            if value is not None:
                queryset = queryset.filter(**{param: value})
        return queryset

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = services.agent_create(
            tenant=self.tenant, actor=self.principal.actor, **serializer.validated_data
        )
        return Response(self.get_serializer(agent).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, pk: str | None = None) -> Response:
        partial = self.action == "partial_update"
        agent = self.get_object()
        serializer = self.get_serializer(agent, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        agent = services.agent_update(
            agent=agent, actor=self.principal.actor, changes=dict(serializer.validated_data)
        )
        return Response(self.get_serializer(agent).data)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        return self.update(request, pk)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        services.agent_delete(agent=self.get_object(), actor=self.principal.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    list=extend_schema(summary="List API keys (admin)"),
    retrieve=extend_schema(summary="Get an API key's metadata (admin)"),
    create=extend_schema(
        summary="Create an API key (admin); the secret is in this response only",
        responses={201: ApiKeyCreatedSerializer},
    ),
    revoke=extend_schema(summary="Revoke an API key (admin); effective on its next request"),
)
class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = ApiKey.objects.select_related("agent")
    serializer_class = ApiKeySerializer
    read_role = Role.ADMIN
    write_role = Role.ADMIN

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        api_key, raw_key = services.api_key_create(
            tenant=self.tenant, actor=self.principal.actor, **serializer.validated_data
        )
        body = ApiKeyCreatedSerializer(api_key, context=self.get_serializer_context()).data
        return Response({**body, "key": raw_key}, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        api_key = services.api_key_revoke(api_key=self.get_object(), actor=self.principal.actor)
        return Response(self.get_serializer(api_key).data)
