"""Date-times given by clients, in the API, on the ledger page and in trust imports.

Issue 18: ``since=...+24:00`` was a 500 (``parse_datetime`` raises ValueError for an offset of a
day or more), and an offset PostgreSQL refuses (``+22:00``) was a 500 on the ledger page. Every
such string now goes through ``config.datetimes.client_datetime_parse``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from config.datetimes import client_datetime_parse
from ledger.models import Agent, Event
from ledger.services import event_append
from trust.interchange.services import agent_import
from trust.models import Dissent

pytestmark = pytest.mark.django_db

# Strings that look like ISO 8601 date-times and name no instant.
NO_INSTANT = [
    "2026-01-01T00:00:00+24:00",
    "2026-01-01T00:00:00-24:00",
    "2026-01-01T00:00:00+99:99",
    "2026-02-30T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",  # a year before year 1 in UTC
    "9999-12-31T23:59:59-01:00",  # a year after 9999 in UTC
    "yesterday",
    "",
]


@pytest.mark.parametrize("raw", NO_INSTANT)
def test_a_string_naming_no_instant_is_none(raw):
    assert client_datetime_parse(raw) is None


@pytest.mark.parametrize(
    ("raw", "utc"),
    [
        ("2026-01-01T22:36:00+22:36", datetime(2026, 1, 1, tzinfo=UTC)),
        ("2026-01-01T00:00:00-23:59", datetime(2026, 1, 1, 23, 59, tzinfo=UTC)),
        ("2026-01-01T00:00:00", datetime(2026, 1, 1, tzinfo=UTC)),
        (" 2026-01-01 00:00Z ", datetime(2026, 1, 1, tzinfo=UTC)),
    ],
)
def test_an_instant_comes_back_in_utc(raw, utc):
    parsed = client_datetime_parse(raw)

    assert parsed == utc
    assert parsed is not None
    assert parsed.utcoffset() == timedelta(0)


def test_a_naive_time_is_refused_where_an_offset_is_required():
    assert client_datetime_parse("2026-01-01T00:00:00", assume_utc=False) is None


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/api/v1/events/", "invalid_filter"),
        ("/api/v1/content/items/", "invalid_parameter"),
        ("/api/v1/trust/metrics/", "validation_error"),
    ],
)
@pytest.mark.parametrize("name", ["since", "until"])
@pytest.mark.parametrize("raw", NO_INSTANT[:7])
def test_a_time_filter_naming_no_instant_is_a_400(api_as, tenant, path, code, name, raw):
    response = api_as(tenant).get(path, {name: raw})

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize("path", ["/api/v1/events/", "/api/v1/content/items/"])
def test_an_offset_postgresql_refuses_is_compared_in_utc(api_as, tenant, path):
    response = api_as(tenant).get(path, {"since": "2026-01-01T00:00:00+22:00"})

    assert response.status_code == 200, response.content


def test_the_ledger_page_reads_offsets_in_utc_and_refuses_a_day(tenant, reviewer_client):
    event_append(tenant=tenant, kind="world.observed", actor="system")

    def rows(**query: str) -> tuple[int, bool]:
        # The HTMX partial: the event rows alone, without the filter form's kind list.
        response = reviewer_client.get("/ledger/", query, HTTP_HX_REQUEST="true")
        return response.status_code, "world.observed" in response.content.decode()

    assert rows(since="2000-01-01T00:00+22:00") == (200, True)  # was a 500
    assert rows(before="2000-01-01T00:00+22:00") == (200, False)
    assert rows(since="2000-01-01T00:00+24:00")[0] == 400


@pytest.mark.parametrize("raw", ["2025-01-01T00:00:00+24:00", "2025-02-30T00:00:00Z"])
def test_a_trust_import_with_a_timestamp_naming_no_instant_is_refused(api_as, tenant, raw):
    document = {
        "agent_name": "Veteran",
        "dissent_history": [{"timestamp": raw, "dissent_text": "t"}],
    }
    client = api_as(tenant)
    events = Event.objects.count()

    response = client.post("/api/v1/trust/import/", document, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"]["path"] == "dissent_history[0].timestamp"
    assert Event.objects.count() == events
    assert not Agent.objects.filter(tenant=tenant, name="Veteran").exists()


def test_a_trust_import_keeps_the_instant_of_a_far_eastern_timestamp(tenant):
    agent = agent_import(
        tenant=tenant,
        document={
            "agent_name": "Veteran",
            "dissent_history": [{"timestamp": "2025-01-02T22:00:00+22:00", "dissent_text": "t"}],
        },
        actor="o",
    )

    dissent = Dissent.objects.get(agent=agent)
    assert dissent.occurred_at == datetime(2025, 1, 2, tzinfo=UTC)
