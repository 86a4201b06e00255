"""API authentication: ``Authorization: Bearer <key>``, resolved to a principal with a tenant."""

from __future__ import annotations

from dataclasses import dataclass

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from ledger import key_cache
from ledger.models import Agent, ApiKey, Tenant
from ledger.services import actor_for_api_key, api_key_hash, api_key_mark_used


@dataclass(frozen=True)
class ApiPrincipal:
    """Who is calling the API: the key, its tenant, its role and (if scoped) its agent."""

    api_key: ApiKey

    is_authenticated = True
    is_anonymous = False

    @property
    def tenant(self) -> Tenant:
        return self.api_key.tenant

    @property
    def role(self) -> str:
        return self.api_key.role

    @property
    def agent(self) -> Agent | None:
        return self.api_key.agent

    @property
    def actor(self) -> str:
        return actor_for_api_key(self.api_key)

    def __str__(self) -> str:
        return self.actor


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[ApiPrincipal, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() != self.keyword.lower():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header; expected 'Bearer <key>'."
            )
        api_key = key_cache.api_key_verified(api_key_hash(header[1]))
        if api_key is None:
            raise exceptions.AuthenticationFailed()
        if api_key_mark_used(api_key=api_key):
            key_cache.api_key_used(api_key)
        return ApiPrincipal(api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) to a request without credentials.
        return f'{self.keyword} realm="api"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Describes the Bearer API key in the OpenAPI schema."""

    target_class = ApiKeyAuthentication
    name = "ApiKey"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key made by an admin: `Authorization: Bearer amk_...`.",
        }
