from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def test_the_openapi_schema_describes_the_api(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    schema = response.json()
    assert "/api/v1/agents/" in schema["paths"]
    assert schema["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"


def test_the_interactive_docs_load_their_assets_from_this_server(client):
    page = client.get("/api/docs/").content.decode()

    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources
    for source in sources:
        assert source.startswith("/"), f"{source} is not served by us (pages must work offline)"
        assert client.get(source).status_code == 200, source


@pytest.mark.parametrize(
    ("path", "field"),
    [("/api/v1/events/batch/", "events"), ("/api/v1/memories/batch/", "memories")],
)
def test_batch_answers_are_documented_as_the_objects_they_are(client, path, field):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    content = schema["paths"][path]["post"]["responses"]["201"]["content"]["application/json"]
    name = content["schema"]["$ref"].rsplit("/", 1)[-1]
    assert field in schema["components"]["schemas"][name]["properties"]
