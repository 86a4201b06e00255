from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerSplitView

from config import probes, views
from config.metrics import metrics_view
from config.ratelimit import sign_in_limited
from ledger import urls as ledger_urls
from memory import urls as memory_urls
from trust import urls as trust_urls

# Every app's urls.py has the same shape: its API routes and its pages.
APPS = (ledger_urls, memory_urls, trust_urls)
api_v1 = [pattern for app in APPS for pattern in app.api_urlpatterns]
pages = [pattern for app in APPS for pattern in app.page_urlpatterns]

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("livez", probes.livez, name="livez"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    # Both sign-in forms behind the same limits; the admin's own login URL is shadowed by this one.
    path("login/", sign_in_limited(auth_views.LoginView.as_view()), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/login/", sign_in_limited(admin.site.login)),
    path("admin/", admin.site.urls),
    *pages,
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("api/schema/", views.SchemaView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start script as a file: no inline script for the CSP.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]

handler404 = "config.errors.not_found"
handler500 = "config.errors.server_error"
