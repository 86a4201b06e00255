"""Typed Python client for the Agent Memory service, sync (``Client``) and async
(``AsyncClient``), one method per API operation.

    from ledgered_memory import Client

    with Client(base_url="http://127.0.0.1:8000", api_key="am_...") as memory:
        memory.memories_create(content="The deploy window is Tuesdays.", agent="planner")
        hits = memory.memories_search(query="when do we deploy?", agent="planner")
"""

from __future__ import annotations

from ledgered_memory import types
from ledgered_memory._async import AsyncClient
from ledgered_memory._core import Page, RetryPolicy
from ledgered_memory._sync import Client
from ledgered_memory.errors import (
    AgentMemoryError,
    ApiError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
    TransportError,
    UnprocessableError,
)

__all__ = [
    "AgentMemoryError",
    "ApiError",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "NotFoundError",
    "Page",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailableError",
    "TransportError",
    "UnprocessableError",
    "types",
]
