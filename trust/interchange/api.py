"""The full export over HTTP: ``GET /api/v1/export/``, the JSON Lines document of
``trust.interchange.lines`` streamed as ``application/x-ndjson`` (an admin's: it holds every
agent's memories). ``?agent=<id>`` exports one agent. Importing stays a command
(``import_jsonl``): one transaction as long as the document is no request's to hold."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request

from ledger.models import Agent, Role
from ledger.scoping import TenantScopedViewSet
from trust.interchange.lines import ExportScope, export_lines

MEDIA_TYPE = "application/x-ndjson"


class _JsonErrors(BaseContentNegotiation):
    """The document is JSON Lines whatever the Accept header says; an error is JSON."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return JSONRenderer(), JSONRenderer.media_type

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        return next(iter(parsers), None)


def _document(scope: ExportScope) -> Iterator[bytes]:
    for _, line in export_lines(scope):
        yield (line + "\n").encode()


class ExportViewSet(TenantScopedViewSet):
    queryset = Agent.objects.all()
    read_role = Role.ADMIN
    content_negotiation_class = _JsonErrors
    pagination_class = None

    @extend_schema(
        summary="Export the tenant, or one agent, as JSON Lines (admin)",
        description="The document `import_jsonl` reads: one JSON object per line, streamed "
        "(docs/integrations.md#export-and-import).",
        parameters=[
            OpenApiParameter("agent", OpenApiTypes.INT, description="Only this agent's own rows")
        ],
        responses={(200, MEDIA_TYPE): OpenApiResponse(response=OpenApiTypes.STR)},
    )
    def list(self, request: Request) -> StreamingHttpResponse:
        agent = None
        raw = request.query_params.get("agent")
        if raw is not None:
            # Not an id (or past bigint): no such agent, as for an id that is not there.
            wanted = int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 19 else 0
            agent = self.get_queryset().filter(pk=wanted).first()
            if agent is None:
                raise NotFound("No such agent.")
        response = StreamingHttpResponse(
            _document(ExportScope(tenant=self.tenant, agent=agent)), content_type=MEDIA_TYPE
        )
        response["Content-Disposition"] = 'attachment; filename="export.jsonl"'
        return response
