"""Retries with backoff through a local stand-in proxy that answers 503 or loses answers, in
front of the real server: a retried POST keeps its Idempotency-Key, so it is written once."""

from __future__ import annotations

import socket

import pytest
from ledgered_memory import (
    AsyncClient,
    Client,
    RetryPolicy,
    ServiceUnavailableError,
    TransportError,
    types,
)

from ledger.models import Agent, Event
from tests.clients.standin_proxy import DROP_ANSWER, FORWARD, UNAVAILABLE, standin_proxy
from tests.clients.threads import run_async

NOTE = "agent.note"


def _client(url: str, key: str, delays: list[float], retries: int = 3) -> Client:
    return Client(
        base_url=url,
        api_key=key,
        retry=RetryPolicy(retries=retries, backoff=0.01),
        sleep=delays.append,
    )


def test_it_retries_a_503_with_the_same_key_and_writes_once(service, tenant_keys):
    delays: list[float] = []
    with standin_proxy(service.port, [UNAVAILABLE, UNAVAILABLE, FORWARD]) as proxy:
        event = _client(proxy.url, tenant_keys.admin, delays).events_create(
            kind=NOTE, actor="system", payload={"n": 1}
        )
    assert event["payload"] == {"n": 1}
    assert Event.objects.filter(kind=NOTE).count() == 1
    keys = [key for method, _, key in proxy.seen]
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert keys[0]
    assert len(delays) == 2


def test_an_answer_lost_after_the_write_is_replayed_not_written_twice(service, tenant_keys):
    delays: list[float] = []
    with standin_proxy(service.port, [DROP_ANSWER, FORWARD]) as proxy:
        agent = _client(proxy.url, tenant_keys.admin, delays).agents_create(name="Once")
    assert agent["name"] == "Once"
    assert [method for method, _, _ in proxy.seen] == ["POST", "POST"]
    assert proxy.seen[0][2] == proxy.seen[1][2]
    assert Agent.objects.filter(name="Once").count() == 1
    assert Event.objects.filter(kind="agent.registered").count() == 1


def test_a_patch_is_not_resent_once_it_may_have_reached_the_server(service, tenant_keys, admin):
    agent = admin.agents_create(name="Patched")
    with (
        standin_proxy(service.port, [DROP_ANSWER, FORWARD]) as proxy,
        pytest.raises(TransportError),
    ):
        _client(proxy.url, tenant_keys.admin, []).agents_update(agent["id"], model="m-2")
    assert len(proxy.seen) == 1


def test_it_gives_up_with_the_typed_error_when_503_persists(service, tenant_keys):
    delays: list[float] = []
    with (
        standin_proxy(service.port, [UNAVAILABLE] * 10) as proxy,
        pytest.raises(ServiceUnavailableError) as caught,
    ):
        _client(proxy.url, tenant_keys.admin, delays, retries=2).agents_list()
    assert caught.value.code == "service_unavailable"
    assert len(proxy.seen) == 3
    assert len(delays) == 2


def test_it_retries_connection_errors_then_raises_a_transport_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens
    delays: list[float] = []
    client = _client(f"http://127.0.0.1:{port}", "am_any", delays, retries=3)
    with pytest.raises(TransportError):
        client.events_create(kind=NOTE, payload={})
    # Full jitter in the upper half of a doubling ceiling: 0.01, 0.02, 0.04 s.
    assert len(delays) == 3
    for attempt, delay in enumerate(delays):
        ceiling = 0.01 * 2**attempt
        assert ceiling / 2 <= delay <= ceiling


def test_the_async_client_retries_503_with_the_same_key(service, tenant_keys):
    async def scenario(url: str) -> types.Event:
        delays: list[float] = []

        async def sleep(seconds: float) -> None:
            delays.append(seconds)

        async with AsyncClient(
            base_url=url,
            api_key=tenant_keys.admin,
            retry=RetryPolicy(retries=3, backoff=0.01),
            sleep=sleep,
        ) as api:
            return await api.events_create(kind=NOTE, actor="system", payload={"n": 2})

    with standin_proxy(service.port, [UNAVAILABLE, FORWARD]) as proxy:
        event = run_async(scenario(proxy.url))
    assert event["payload"] == {"n": 2}
    assert proxy.seen[0][2] == proxy.seen[1][2]
    assert Event.objects.filter(kind=NOTE).count() == 1
