"""examples/review_loop.py runs green against the real server and leaves what it says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trust.models import Dissent, Override, Round

ROOT = Path(__file__).resolve().parents[2]


def _run(service, key: str, tag: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "examples/review_loop.py", "--tag", tag, *options],
        cwd=ROOT,
        env={**os.environ, "AGENT_MEMORY_URL": service.base_url, "AGENT_MEMORY_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_review_loop_example_plays_rounds_and_prints_trust(service, tenant_keys):
    done = _run(service, tenant_keys.admin, "t1")  # six rounds by default

    assert done.returncode == 0, done.stderr
    assert Round.objects.filter(round_id__startswith="review-t1-").count() == 6
    assert Round.objects.exclude(finalized_at=None).count() == 6
    assert Dissent.objects.count() == 18  # three reviewers, six rounds
    assert set(Dissent.objects.values_list("impact", flat=True)) == {True, False}
    reverted = Override.objects.get(round_id="review-t1-1")
    assert reverted.regret is True
    assert reverted.reverted_at is not None
    assert Override.objects.filter(regret=True).count() == 1
    lines = done.stdout.splitlines()
    table = [line for line in lines if line.startswith(("Creator-", "Reviewer-"))]
    assert len(table) == 5
    assert any("round 1 reverted" in line for line in lines)
    assert any(line.startswith("metrics") and "dissents 18," in line for line in lines)
    # On probation in the first rounds the advocate is drawn from everyone; by round 6 by trust.
    assert "drawn from everyone" in lines[1]
    sixth = next(line for line in lines if line.startswith("round 6:"))
    assert "weights {" in sixth


def test_it_runs_again_on_the_same_tenant(service, tenant_keys):
    assert _run(service, tenant_keys.admin, "a", "--rounds", "2").returncode == 0
    again = _run(service, tenant_keys.admin, "b", "--rounds", "2")
    assert again.returncode == 0, again.stderr
    assert Round.objects.count() == 4
