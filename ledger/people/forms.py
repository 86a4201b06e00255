"""Forms of the People page: they parse posted fields, the services decide."""

from __future__ import annotations

from django import forms

from ledger.people.services import SEAT_ROLES

ROLE_CHOICES = [(role, role.capitalize()) for role in SEAT_ROLES]


class InviteForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    email = forms.EmailField(required=False, label="Email (new accounts)")
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=SEAT_ROLES[0], label="Role")


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES, label="Role")


class SwitchForm(forms.Form):
    tenant = forms.IntegerField(min_value=1, label="Tenant")
