"""The service's version, from the one place it is written: pyproject.toml's ``project.version``.

The image copies pyproject.toml beside the code and does not install the project as a
distribution, so the file is read, not the installed metadata. ``/healthz`` and the OpenAPI
schema's ``info.version`` report it; CHANGELOG.md has a section for it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _read() -> str:
    with PYPROJECT.open("rb") as handle:
        return str(tomllib.load(handle)["project"]["version"])


VERSION = _read()
