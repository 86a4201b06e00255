from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from config import views
from config.ratelimit import sign_in_limited
from ledger.urls import api_urls as ledger_api
from memory.content_urls import api_router as content_api
from memory.kb_urls import api_router as kb_api
from memory.urls import api_router as memory_api
from trust.urls import api_urls as trust_api

api_v1 = [*ledger_api, *memory_api.urls, *kb_api.urls, *trust_api, *content_api.urls]

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    # Both sign-in forms behind the same limits; the admin's own login URL is shadowed by this one.
    path("login/", sign_in_limited(auth_views.LoginView.as_view()), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/login/", sign_in_limited(admin.site.login)),
    path("admin/", admin.site.urls),
    path("trust/", include("trust.web_urls")),
    path("memory/", include("memory.web_urls")),
    path("ledger/", include("ledger.web_urls")),
    path("jobs/", include("ledger.jobs_web_urls")),
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start script as a file: no inline script for the CSP.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]

handler404 = "config.errors.not_found"
handler500 = "config.errors.server_error"
