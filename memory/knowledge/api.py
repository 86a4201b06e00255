"""REST endpoints of the knowledge base.

Roles: every key reads published documents and searches them; reviewers (and admins) also see
drafts, and write, publish and unpublish; deleting (which shreds the text in the ledger too) is
for admins.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import ApiError
from ledger.models import Role
from ledger.scoping import TenantScopedViewSet
from memory.knowledge.selectors import knowledge_search
from memory.knowledge.serializers import (
    KnowledgeChunkSerializer,
    KnowledgeDocumentCreateSerializer,
    KnowledgeDocumentSerializer,
    KnowledgeDocumentUpdateSerializer,
    KnowledgeSearchRequestSerializer,
    KnowledgeSearchResultSerializer,
)
from memory.knowledge.services import (
    knowledge_document_create,
    knowledge_document_delete,
    knowledge_document_publish,
    knowledge_document_unpublish,
    knowledge_document_update,
)
from memory.models import KnowledgeChunk, KnowledgeDocument


@extend_schema_view(
    list=extend_schema(
        summary="List knowledge-base documents",
        description="Agent keys see published documents only; reviewers and admins see drafts.",
        parameters=[
            OpenApiParameter("kind", str, description="article or skill"),
            OpenApiParameter("category", str),
            OpenApiParameter("published", bool, description="true: published; false: drafts"),
        ],
    ),
    retrieve=extend_schema(summary="Get a knowledge-base document"),
    create=extend_schema(
        summary="Write a knowledge-base document (reviewer)",
        request=KnowledgeDocumentCreateSerializer,
        responses={201: KnowledgeDocumentSerializer},
    ),
    partial_update=extend_schema(
        summary="Change a document (reviewer); a published article is re-chunked",
        request=KnowledgeDocumentUpdateSerializer,
        responses=KnowledgeDocumentSerializer,
    ),
    destroy=extend_schema(summary="Delete a document for good (admin); its text is shredded"),
    publish=extend_schema(
        summary="Publish a document (reviewer): articles are chunked and embedded for search",
        request=None,
        responses=KnowledgeDocumentSerializer,
    ),
    unpublish=extend_schema(
        summary="Take a document back to draft (reviewer); it leaves search at once",
        request=None,
        responses=KnowledgeDocumentSerializer,
    ),
    chunks=extend_schema(
        summary="The search chunks of a document (none for drafts and skills)",
        responses=KnowledgeChunkSerializer(many=True),
    ),
)
class KnowledgeDocumentViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet
):
    queryset = KnowledgeDocument.objects.order_by("id")
    serializer_class = KnowledgeDocumentSerializer
    read_role = Role.AGENT
    write_role = Role.REVIEWER
    role_by_action = {"destroy": Role.ADMIN}
    # The knowledge base is the tenant's: every key reads it, writing it is tenant-wide.
    agent_bound_actions = frozenset({"list", "retrieve", "chunks"})

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not Role.allows(self.principal.role, Role.REVIEWER):
            queryset = queryset.filter(published_at__isnull=False)
        if self.action != "list":
            return queryset
        params = self.request.query_params
        for field in ("kind", "category"):
            if field in params:
                queryset = queryset.filter(**{field: params[field]})
        if "published" in params:
            if params["published"] not in ("true", "false"):
                raise ApiError(code="invalid_filter", message="published must be true or false.")
            queryset = queryset.filter(published_at__isnull=params["published"] == "false")
        return queryset

    def create(self, request: Request) -> Response:
        serializer = KnowledgeDocumentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        document = knowledge_document_create(
            tenant=self.tenant,
            fields=serializer.to_fields(dict(serializer.validated_data)),
            actor=self.principal.actor,
            publish=serializer.validated_data["publish"],
        )
        return Response(self.get_serializer(document).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        serializer = KnowledgeDocumentUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        document = knowledge_document_update(
            document=self.get_object(),
            actor=self.principal.actor,
            changes=dict(serializer.validated_data),
        )
        return Response(self.get_serializer(document).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        knowledge_document_delete(document=self.get_object(), actor=self.principal.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @action(detail=True, methods=["post"])
    def publish(self, request: Request, pk: str | None = None) -> Response:
        document = knowledge_document_publish(
            document=self.get_object(), actor=self.principal.actor
        )
        return Response(self.get_serializer(document).data)

    @action(detail=True, methods=["post"])
    def unpublish(self, request: Request, pk: str | None = None) -> Response:
        document = knowledge_document_unpublish(
            document=self.get_object(), actor=self.principal.actor
        )
        return Response(self.get_serializer(document).data)

    # Every chunk in one answer (no cursor): pagination_class=None says so in the schema.
    @action(detail=True, methods=["get"], pagination_class=None)
    def chunks(self, request: Request, pk: str | None = None) -> Response:
        chunks = KnowledgeChunk.objects.filter(document=self.get_object()).order_by("position")
        return Response(KnowledgeChunkSerializer(chunks, many=True).data)


class KnowledgeSearchViewSet(TenantScopedViewSet):
    """A read sent as POST (the query can be long), open to every role."""

    queryset = KnowledgeChunk.objects.all()
    write_role = Role.AGENT
    agent_bound_actions = frozenset({"create"})

    @extend_schema(
        summary="Search the published knowledge base",
        description="Hybrid: the nearest chunks by embedding (HNSW) and the full-text matches "
        "of any query word, fused into one score; chunks with the same text collapse.",
        request=KnowledgeSearchRequestSerializer,
        # Answers 200: a read (or an assembly) sent as POST, nothing is created.
        responses={200: KnowledgeSearchResultSerializer},
    )
    def create(self, request: Request) -> Response:
        serializer = KnowledgeSearchRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        outcome = knowledge_search(
            tenant=self.tenant,
            query=serializer.validated_data["query"],
            top_k=serializer.validated_data["top_k"],
        )
        return Response(KnowledgeSearchResultSerializer(outcome).data)
