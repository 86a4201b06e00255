"""One version, written in pyproject.toml, reported by /healthz and the OpenAPI schema, and
described in CHANGELOG.md."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from config.version import VERSION

ROOT = Path(__file__).resolve().parent.parent


def pyproject_version():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]


def test_the_version_is_pyprojects():
    assert pyproject_version() == VERSION
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


@pytest.mark.django_db
def test_healthz_reports_it(client):
    assert client.get("/healthz").json()["version"] == pyproject_version()


@pytest.mark.django_db
def test_the_openapi_schema_reports_it(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")

    assert response.json()["info"]["version"] == pyproject_version()


def test_the_changelog_opens_with_this_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)

    assert headings[0] == pyproject_version()
    assert len(headings) == len(set(headings))
