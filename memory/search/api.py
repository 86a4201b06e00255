"""``POST /api/v1/memories/search/``: memory search over HTTP.

An action of ``memory.episodic.api.MemoryViewSet`` (its path and name stay under ``memories``),
written here as a mixin so the endpoint lives with the search it calls.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from ledger.models import Agent
from memory.search.ranking import SOURCES
from memory.search.selectors import memories_search
from memory.search.serializers import SearchRequestSerializer, SearchResultSerializer


class MemorySearchActions:
    """The ``search`` action; the view it is mixed into says which agent the caller may name."""

    def agent_named(self, name: str | None) -> Agent:
        raise NotImplementedError

    @extend_schema(
        summary="Search the agent's memories, the ledger it may see and the knowledge base",
        description="One call over four sources (agent memory, audit log, workflow steps, "
        "knowledge base), ranked by 0.5·similarity + 0.2·recency + 0.2·importance + "
        "0.1·source priority, de-duplicated by content hash; each result carries its terms.",
        request=SearchRequestSerializer,
        responses=SearchResultSerializer,
    )
    @action(detail=False, methods=["post"])
    def search(self, request: Request) -> Response:
        serializer = SearchRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        outcome = memories_search(
            agent=self.agent_named(data.get("agent")),
            query=data["query"],
            top_k=data["top_k"],
            sources=data.get("sources", SOURCES),
            filters=data.get("filters"),
            weights=data.get("weights"),
            threshold=data.get("threshold"),
            vector=data.get("embedding"),
            validity=data["validity"],
        )
        return Response(SearchResultSerializer(outcome).data)
