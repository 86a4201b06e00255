from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ledger import services as ledger_services
from ledger.models import Role
from memory.embeddings.backends import embedder_reset


@pytest.fixture
def embedder_down(settings: Any) -> Iterator[None]:
    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_URL = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    settings.EMBEDDING_TIMEOUT_SECONDS = 0.5
    embedder_reset()
    yield
    embedder_reset()


@pytest.fixture
def clock() -> datetime:
    """A fixed 'now' the services are given, so deadlines and windows are exact."""
    return datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def login(tenant):
    """A client signed in as a person with ``role`` in ``tenant`` (or in ``in_tenant``)."""

    def make(role: str = Role.REVIEWER, username: str = "ada", in_tenant=None) -> Client:
        user = get_user_model().objects.create_user(username=username, password="pw-12345678")
        ledger_services.membership_grant(tenant=in_tenant or tenant, user=user, role=role)
        client = Client()
        client.force_login(user)
        return client

    return make
