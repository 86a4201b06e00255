"""Shared start-up for benchmarks: Django on its own embedded PostgreSQL and Redis under var/bench.

Benchmarks print figures; they are not tests and never run in CI.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def django_setup(data_dir: Path | None = None) -> None:
    """Django on the embedded servers of ``data_dir`` (default: $AGENT_MEMORY_DATA_DIR, else
    var/bench), started if need be, with the schema migrated."""
    sys.path.insert(0, str(ROOT))
    if data_dir is not None:
        os.environ["AGENT_MEMORY_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("AGENT_MEMORY_DATA_DIR", str(ROOT / "var" / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django
    from django.conf import settings

    django.setup()
    from config import embedded, embedded_redis

    if not os.environ.get("DATABASE_URL"):
        embedded.postgres_start(settings.EMBEDDED)
    if not os.environ.get("REDIS_URL"):
        embedded_redis.redis_start(settings.EMBEDDED)
    from django.core.management import call_command
    from django.db import connections

    from config.database import OWNER_CONNECTION_FIELDS, database_owner_settings

    call_command("migrate", verbosity=0)
    owner = database_owner_settings()
    if owner is not None:
        # Benchmarks load rows in bulk and ANALYZE or VACUUM them, which the tables' owner may
        # do and the service's role may not: they connect as the owner.
        connections["default"].close()
        connections["default"].settings_dict.update(
            {key: owner.get(key) for key in OWNER_CONNECTION_FIELDS}
        )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def describe(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f} ms, p95 {percentile(values, 0.95):.2f} ms, "
        f"max {max(values):.2f} ms over {len(values)} runs"
    )
