from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.health import health_report


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database, Redis and a Celery worker are all alive, else 503 with details."""
    report = health_report()
    return JsonResponse(report, status=200 if report["ok"] else 503)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html", {"membership": getattr(request, "membership", None)})
