"""The embedded PostgreSQL's server settings."""

from __future__ import annotations

import os

import pytest

from config import embedded


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

    assert embedded.shared_buffers() == expected
