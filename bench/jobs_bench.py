"""Background-job benchmark (issue 7): decay, TTL cleanup and quota enforcement over 1,000,000
memories each; targets <= 10 s per job and <= 300 MB peak memory of the process running it.

    .venv/bin/python bench/jobs_bench.py [--memories 1000000] [--agents 100] [--share 0.2]

For each job the memory table is emptied and refilled set-based inside PostgreSQL
(``INSERT ... SELECT generate_series``: no rows pass through Python), ``--share`` of the rows
being due (decayed, expired, or over the quota). The job then runs exactly as the worker runs
it (its Celery task, applied in a child process that does nothing else), and the parent reads
that child's peak RSS from ``os.wait4``. Each job runs twice: the second run shows the cost of
finding nothing left.

Regret inference over 100,000 overrides is measured by bench/trust_bench.py (its last part).
Uses its own embedded servers under var/bench-jobs unless AGENT_MEMORY_DATA_DIR is set.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from _setup import ROOT, bench_print, bench_summary, django_setup, json_option_add, load_bar

TARGET_SECONDS = 10.0
TARGET_RSS_MB = 300.0
TASKS = {
    "memory.decay": "memory.tasks.memories_decay_task",
    "memory.ttl": "memory.tasks.memories_expire_task",
    "memory.quota": "memory.tasks.memories_enforce_quota_task",
}


def say(text: str) -> None:
    bench_print(f"[{time.strftime('%H:%M:%S')}] {text}")


def load(job: str, *, memories: int, agents: int, share: float) -> int:
    """Empty the memories and insert ``memories`` rows over ``agents`` agents; returns rows due."""
    from django.db import connection
    from django.utils import timezone

    from ledger.models import Agent, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="jobs-bench", defaults={"name": "Jobs bench"})
    for number in range(agents):
        Agent.objects.get_or_create(tenant=tenant, name=f"JobsBench{number:03d}")
    agent_ids = list(
        Agent.objects.filter(tenant=tenant).order_by("pk").values_list("pk", flat=True)
    )
    per_agent = memories // agents
    due_every = max(1, round(1 / share))
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE memory_memory CASCADE")
        # Decayed rows are spread evenly (every due_every-th), the hard case for a batch that
        # scans. Expired rows come as whole sessions of 20, as conversation memories stored
        # together with one TTL do (a scattered expiry also recomputes each gone memory's
        # session neighbours' keyword documents: see docs/jobs.md for that case).
        cursor.execute(
            """
            INSERT INTO memory_memory (
                tenant_id, agent_id, session_id, role, content, memory_type, importance,
                embedding_model, content_hash, metadata, tags, occurred_at, created_at,
                updated_at, expires_at, retrieval_count, search_length)
            SELECT %(tenant)s, (%(agents)s::bigint[])[1 + (n - 1) / %(per_agent)s],
                   's' || ((n - 1) / 20), 'user', 'memory number ' || n, 'conversation',
                   CASE WHEN %(job)s = 'memory.decay' AND n %% %(every)s = 0 THEN 0.5
                        WHEN %(job)s = 'memory.quota' THEN 0.3 + (n %% 97) / 200.0
                        ELSE 0.9 END,
                   '', md5(n::text), '{}'::jsonb, '{}'::varchar[],
                   %(now)s - make_interval(mins => n), ts, ts,
                   CASE WHEN %(job)s = 'memory.ttl' AND ((n - 1) / 20) %% %(every)s = 0
                        THEN %(now)s - interval '1 minute'
                        ELSE %(now)s + interval '30 days' END,
                   0, 0
            FROM generate_series(1, %(total)s) AS n,
                 LATERAL (SELECT CASE WHEN %(job)s = 'memory.decay' AND n %% %(every)s = 0
                                      THEN %(now)s - interval '60 weeks'
                                      ELSE %(now)s END AS ts) AS created
            """,
            {
                "tenant": tenant.pk,
                "agents": agent_ids,
                "per_agent": per_agent,
                "job": job,
                "every": due_every,
                "now": now,
                "total": per_agent * agents,
            },
        )
        cursor.execute("ANALYZE memory_memory")
    if job == "memory.quota":
        return agents * (per_agent - quota_for(per_agent, share))
    return (per_agent * agents) // due_every


def quota_for(per_agent: int, share: float) -> int:
    return per_agent - round(per_agent * share)


def run_child(job: str, quota: int) -> dict[str, Any]:
    """Run the job's task in a fresh process; its timing from its output, its peak RSS here."""
    env = {**os.environ, "MEMORY_QUOTA_PER_AGENT": str(quota)}
    child = subprocess.Popen(
        [sys.executable, __file__, "--run-job", job],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{job} failed:\n{output}")
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    result["peak_rss_mb"] = usage.ru_maxrss / 1024  # kilobytes on Linux
    return result


def run_job_here(job: str) -> None:
    """The child: the job as the worker runs it, timed from the first batch to the last."""
    django_setup()
    from importlib import import_module

    from ledger.models import JobRun

    module, _, name = TASKS[job].rpartition(".")
    task = getattr(import_module(module), name)
    started = time.perf_counter()
    task.apply()
    seconds = time.perf_counter() - started
    run = JobRun.objects.filter(job=job).order_by("-pk").first()
    assert run is not None
    print(
        json.dumps(
            {
                "seconds": seconds,
                "rows": run.rows_touched,
                "status": run.status,
                "requeued": run.requeued,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--share", type=float, default=0.2, help="share of rows due")
    parser.add_argument("--jobs", default=",".join(TASKS))
    parser.add_argument("--run-job", help=argparse.SUPPRESS)
    json_option_add(parser)
    args = parser.parse_args()
    os.environ.setdefault("AGENT_MEMORY_DATA_DIR", str(ROOT / "var" / "bench-jobs"))
    if args.run_job:
        run_job_here(args.run_job)
        return
    with bench_summary(as_json=args.json, name="jobs_bench") as summary:
        failed = jobs_measure(args, summary)
    sys.exit(1 if failed else 0)


def jobs_measure(args: argparse.Namespace, summary: dict[str, Any]) -> bool:
    """Each job: load, then two runs in fresh processes. Returns whether a target was missed."""
    django_setup()
    from django.conf import settings

    say(
        f"{args.memories:,} memories over {args.agents} agents, {args.share:.0%} due; "
        f"batches of {settings.JOB_BATCH_SIZE}, budget {settings.JOB_TIME_BUDGET_SECONDS} s"
    )
    per_agent = args.memories // args.agents
    quota = quota_for(per_agent, args.share)
    failed = False
    jobs = args.jobs.split(",")
    # A load is one INSERT ... SELECT: the bar counts the steps (a load, two runs per job).
    bar = load_bar(total=3 * len(jobs), description="jobs", unit="step")
    for job in jobs:
        started = time.perf_counter()
        due = load(job, memories=args.memories, agents=args.agents, share=args.share)
        bar.update(1)
        loaded = time.perf_counter() - started
        say(f"{job}: loaded in {loaded:.1f} s, {due:,} rows due")
        summary[job] = {"memories": args.memories, "load_seconds": loaded, "due": due}
        for attempt in ("first run", "second run"):
            result = run_child(job, quota)
            bar.update(1)
            ok = result["seconds"] <= TARGET_SECONDS and result["peak_rss_mb"] <= TARGET_RSS_MB
            failed |= not ok
            say(
                f"{job} {attempt}: {result['seconds']:.2f} s, {result['rows']:,} rows, "
                f"peak RSS {result['peak_rss_mb']:.0f} MB, {result['status']}"
                f"{', re-queued' if result['requeued'] else ''} "
                f"(targets {TARGET_SECONDS:.0f} s, {TARGET_RSS_MB:.0f} MB: "
                f"{'met' if ok else 'NOT met'})"
            )
            summary[job][attempt.replace(" ", "_")] = {**result, "targets_met": ok}
    bar.close()
    return failed


if __name__ == "__main__":
    main()
