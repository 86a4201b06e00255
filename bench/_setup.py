"""Shared start-up for benchmarks: Django on its own embedded PostgreSQL and Redis under var/bench.

Benchmarks print figures; they are not tests and never run in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # config.progress, before django_setup has run

from config.progress import progress_bar  # noqa: E402 (needs ROOT on the path)


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


# --- Loading progress and --json (issue 24: the long commands' config/progress.py) ------------


def load_bar(*, total: int | None, description: str, unit: str = "row") -> Any:
    """A load phase's progress bar: config.progress's, on stderr and only on a terminal, gone
    when the phase ends. Lines printed meanwhile go through ``bench_print``."""
    return progress_bar(total=total, description=description, unit=unit)


def bench_print(text: str) -> None:
    """A line for people that does not tear a progress bar on stderr."""
    from tqdm import tqdm

    with tqdm.external_write_mode(file=sys.stderr):
        print(text, flush=True)


def json_option_add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document with the figures on stdout (the lines for people go to "
        "stderr)",
    )


@contextlib.contextmanager
def bench_summary(*, as_json: bool, name: str) -> Iterator[dict[str, Any]]:
    """The run of a benchmark: a dict its phases fill with their figures. With ``--json`` the
    lines for people go to stderr meanwhile, and the dict leaves as one JSON document on stdout
    at the end (after a failure too, with what was measured), so a pipe gets figures and
    nothing else; without it the output is as it was."""
    summary: dict[str, Any] = {"benchmark": name}
    if not as_json:
        yield summary
        return
    stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield summary
    except SystemExit as exit_:  # a failed check still leaves its figures
        summary["exit_code"] = exit_.code
        raise
    finally:
        stdout.write(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
        stdout.flush()
