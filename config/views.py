from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails
from drf_spectacular.views import SpectacularAPIView

from config.health import health_report
from config.schema import schema_generation_lock
from ledger.models import Membership
from ledger.selectors import tenant_overview


class HtmxHttpRequest(HttpRequest):
    """A browser request after our middleware: htmx details and the person's tenant membership."""

    htmx: HtmxDetails
    membership: Membership | None
    # Every seat of the person (a tenant switcher shows when there are several).
    memberships: list[Membership]


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database, Redis and a Celery worker are all alive, else 503 with details."""
    report = health_report()
    return JsonResponse(report, status=200 if report["ok"] else 503)


@login_required
@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    membership = request.membership
    overview = tenant_overview(tenant=membership.tenant) if membership else None
    return render(request, "home.html", {"membership": membership, "overview": overview})


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema, made under ``config.schema.schema_generation_lock``: drf-spectacular
    cannot make two schemas at once in one process."""

    def _get_schema_response(self, request: Any) -> Any:
        with schema_generation_lock:
            return super()._get_schema_response(request)  # type: ignore[no-untyped-call]
