"""Demo memories and content-store results for ``manage.py up --demo``.

Registered with ``ledger.demo`` from ``MemoryConfig.ready``. Everything goes through the real
services (so the ledger records it, search indexes it and the content store counts its tokens),
and only once: a second call finds the demo's memories and action results and adds nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction

from ledger.models import Agent, Tenant
from memory.content.services import ItemDraft, action_result_record
from memory.episodic.services import MemoryDraft, memories_store
from memory.models import ContentItem, ContentItemType, Memory

DEMO_TAG = "demo"

# (agent, run, when, role, type, content)
_MEMORIES: list[tuple[str, str, str, str, str, str]] = [
    (
        "Creator1",
        "run_20250214_153000",
        "2025-02-14T15:31:00",
        "assistant",
        "fact",
        "Exit code 137 on a container means the process got SIGKILL, usually from the OOM killer.",
    ),
    (
        "Creator1",
        "run_20250214_153000",
        "2025-02-14T15:48:00",
        "assistant",
        "error",
        "orders_daily failed on 2025-02-13 because the 2025-02-12 deploy halved its memory "
        "limit to 4 GiB while its peak usage is about 5.1 GiB.",
    ),
    (
        "Creator1",
        "run_20250215_091000",
        "2025-02-15T09:12:00",
        "assistant",
        "decision",
        "I proposed merging PR #482 before checking whether the webhook receiver is idempotent.",
    ),
    (
        "Reviewer1",
        "run_20250214_153000",
        "2025-02-14T15:35:00",
        "assistant",
        "fact",
        "Week-over-week growth of 4% in input rows does not explain an OOM in a job with 40% "
        "memory headroom.",
    ),
    (
        "Reviewer1",
        "run_20250215_091000",
        "2025-02-15T09:20:00",
        "assistant",
        "error",
        "I assumed upstream deduplication by event id protects billing from duplicate webhooks; "
        "its window is only 10 minutes.",
    ),
    (
        "Reviewer2",
        "run_20250214_153000",
        "2025-02-14T15:40:00",
        "assistant",
        "fact",
        "The deploy log of 2025-02-12T17:05Z shows the orders_daily memory limit lowered from "
        "8 GiB to 4 GiB.",
    ),
    (
        "Reviewer2",
        "run_20250215_091000",
        "2025-02-15T09:25:00",
        "assistant",
        "fact",
        "Before approving retries on payment events, check that the receiver rejects duplicate "
        "idempotency keys.",
    ),
    (
        "Reviewer2",
        "run_20250215_091000",
        "2025-02-15T09:31:00",
        "user",
        "explicit",
        "Always record a dissent on payment changes, even when the verdict goes the other way.",
    ),
    (
        "Curator1",
        "run_20250214_153000",
        "2025-02-14T15:55:00",
        "assistant",
        "fact",
        "Known failure mode: a resource limit changed in an unrelated deploy makes a stable batch "
        "job fail near its end.",
    ),
    (
        "Curator1",
        "run_20250215_091000",
        "2025-02-15T09:40:00",
        "assistant",
        "decision",
        "Reviewer2's dissent on PR #482 is recorded so a later duplicate-charge incident can be "
        "traced back to it.",
    ),
]


def _orders_rows(day: int, count: int) -> list[dict[str, object]]:
    return [
        {
            "order_id": 91000 + day * 1000 + i,
            "customer": f"cust_{(i * 37) % 500:04d}",
            "amount_eur": round(12.5 + (i * 7.3) % 240, 2),
            "status": ("paid", "refunded", "pending")[i % 3],
            "created_at": f"2025-02-{day:02d}T{i % 24:02d}:{(i * 7) % 60:02d}:00Z",
        }
        for i in range(count)
    ]


def _job_log(minutes: int) -> str:
    lines = [
        f"2025-02-13T01:{m % 60:02d}:00Z orders_daily step {m}: rss={3.1 + m * 0.05:.2f}GiB "
        f"rows_done={m * 41000}"
        for m in range(minutes)
    ]
    return "\n".join([*lines, "2025-02-13T02:14:00Z killed: exit code 137 (SIGKILL)"])


# (agent, run, action type, item type, content): the same action twice in a run gives one full
# and one compacted rendering, which is what the token savings page shows.
def _action_results() -> list[tuple[str, str, str, str, object]]:
    return [
        ("Creator1", "run_20250214_153000", "scheduler.logs", "custom", _job_log(40)),
        ("Creator1", "run_20250214_153000", "scheduler.logs", "custom", _job_log(41)),
        ("Reviewer1", "run_20250214_153000", "sql.query", "database_result", _orders_rows(12, 80)),
        ("Reviewer1", "run_20250214_153000", "sql.query", "database_result", _orders_rows(13, 90)),
        ("Reviewer1", "run_20250214_153000", "sql.query", "database_result", _orders_rows(11, 75)),
        ("Reviewer2", "run_20250215_091000", "github.diff", "web_content", _diff_text(1)),
        ("Reviewer2", "run_20250215_091000", "github.diff", "web_content", _diff_text(2)),
        ("Curator1", "run_20250215_091000", "sql.query", "database_result", _orders_rows(14, 60)),
    ]


def _diff_text(revision: int) -> str:
    hunks = [
        f"@@ -{10 * i},6 +{10 * i},9 @@ def deliver(event):\n"
        f"-    post(event)\n"
        f"+    for attempt in range({5 + revision}):\n"
        f"+        if post(event).ok:\n"
        f"+            return\n"
        f"+        sleep(backoff(attempt))  # revision {revision}, hunk {i}"
        for i in range(1, 30)
    ]
    return "diff --git a/billing/webhooks.py b/billing/webhooks.py\n" + "\n".join(hunks)


def memory_demo_seed(tenant: Tenant) -> str:
    """Memories for the demo agents and action results in the demo runs, each once."""
    agents = {agent.name: agent for agent in Agent.objects.for_tenant(tenant)}
    notes = []
    if not Memory.objects.filter(tenant=tenant, tags__contains=[DEMO_TAG]).exists():
        stored = 0
        with transaction.atomic():
            for name, run_id, when, role, memory_type, content in _MEMORIES:
                if name not in agents:
                    continue
                draft = MemoryDraft(
                    content=content,
                    role=role,
                    session_id=run_id,
                    memory_type=memory_type,
                    tags=[DEMO_TAG],
                    occurred_at=datetime.fromisoformat(when).replace(tzinfo=UTC),
                )
                stored += len(memories_store(agent=agents[name], drafts=[draft], actor=name))
        notes.append(f"{stored} memories")
    results = _action_results()
    runs = sorted({result[1] for result in results})
    if not ContentItem.objects.filter(tenant=tenant, run_id__in=runs).exists():
        recorded = 0
        for name, run_id, action_type, item_type, value in results:
            if name not in agents:
                continue
            action_result_record(
                agent=agents[name],
                actor=name,
                run_id=run_id,
                action_type=action_type,
                draft=ItemDraft(
                    content=value,
                    item_type=ContentItemType(item_type),
                    source=f"demo {action_type}",
                ),
            )
            recorded += 1
        notes.append(f"{recorded} action results")
    return ", ".join(notes)
