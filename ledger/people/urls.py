"""The People page, its actions and the tenant switch; and the invited person's password page."""

from __future__ import annotations

from typing import Any

from django.urls import path

from ledger.people import views

app_name = "people"

urlpatterns: list[Any] = [
    path("", views.people_list, name="list"),
    path("invite/", views.people_invite, name="invite"),
    path("<int:pk>/role/", views.people_role_change, name="role"),
    path("<int:pk>/remove/", views.people_remove, name="remove"),
    path("switch/", views.tenant_switch, name="switch"),
]

# Outside the People section: the invited person opens it before they can sign in.
welcome_urlpatterns: list[Any] = [
    path("welcome/<uidb64>/<token>/", views.SetPasswordView.as_view(), name="set_password"),
]
