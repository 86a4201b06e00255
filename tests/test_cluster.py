"""The many-process harness (bench/cluster.py --quick): its correctness checks, not its figures.

Two gunicorn servers, two Celery workers and one beat on their own embedded PostgreSQL and Redis
(under var/test-cluster, apart from the test run's), the mixed load through both servers, then:
no job ran twice at once, an Idempotency-Key replays across servers, one key's rate limit holds
whichever server counts, and every acknowledged write is stored exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKS = {
    "exactly one beat",
    "no job runs twice at once",
    "idempotency across servers",
    "rate limits across servers",
    "nothing acknowledged is lost",
}


@pytest.mark.slow
def test_many_web_and_worker_processes_keep_the_service_correct(tmp_path: Path) -> None:
    report = tmp_path / "cluster.json"
    # The harness makes its own stack: nothing of the test run's settings may leak into it.
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "AGENT_MEMORY_DATA_DIR"}
        and key not in {"DATABASE_URL", "DATABASE_MIGRATE_URL", "REDIS_URL"}
        # tests/conftest.py points the test servers at one shared checkpoint folder: the
        # harness's own tenant 1 would meet their checkpoints there, signed by another key.
        and not key.startswith("LEDGER_ANCHOR")
    }
    result = subprocess.run(
        [
            sys.executable,
            "bench/cluster.py",
            "--quick",
            "--data-dir",
            str(ROOT / "var" / f"test-cluster-{os.getpid()}"),
            "--json",
            str(report),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert report.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    checks = {check["name"]: check for check in json.loads(report.read_text())["checks"]}
    assert set(checks) == CHECKS
    failed = [f"{name}: {check['detail']}" for name, check in checks.items() if not check["ok"]]
    assert not failed, "\n".join(failed)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
