#!/usr/bin/env python3
"""No filler results (issue 22, item 8): do new, important, unrelated memories outrank the
relevant one on recency and importance alone?

    python bench/search_distractors.py

A scripted agent (in process, real PostgreSQL + pgvector and the service's embedder under
var/bench-distractors): twelve facts stored months ago with ordinary importance, each the answer
to one query, and twelve memories stored today with high importance about other things (the
"staging VPN password" kind). Each query is searched through ``memories_search`` with the
service's default weights, once with the relevance gate off and once on
(``SEARCH_RELEVANCE_GATE``; memory.search.ranking.ranked), and the bench prints, per query, the
rank of its fact and how many results sharing no word with the query sit above it, then the
share of queries whose fact comes first, its mean reciprocal rank and the fillers above it.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _service import service_stack
from _setup import ROOT

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)

# (query, the fact that answers it, its age in days)
FACTS = [
    (
        "vendor contract renewal",
        "Signed the vendor contract with Acme: it renews every "
        "12 months and needs 60 days' notice to cancel.",
        120,
    ),
    (
        "which database version do we run",
        "Production runs PostgreSQL 16 with pgvector 0.8 on the primary and both replicas.",
        200,
    ),
    (
        "customer invoice currency",
        "The customer prefers invoices in EUR, sent on the first working day of the month.",
        90,
    ),
    (
        "who owns the billing service",
        "Dana owns the billing service; escalate payment failures to her team.",
        150,
    ),
    (
        "office wifi network name",
        "The office Wi-Fi is called Harbour-5G; guests use Harbour-Guest.",
        300,
    ),
    (
        "when is the quarterly planning meeting",
        "Quarterly planning happens on the second Tuesday of each quarter at 10:00.",
        60,
    ),
    (
        "backup retention policy",
        "Nightly backups are kept for 35 days and monthly ones for a year.",
        180,
    ),
    (
        "favourite lunch place of the team",
        "The team likes the ramen place on Dock Street for Friday lunches.",
        240,
    ),
    (
        "API rate limit for partners",
        "Partners are limited to 600 API requests per minute per key.",
        100,
    ),
    ("where are the design files", "Design files live in the shared Figma project 'Atlas UI'.", 75),
    (
        "laptop refresh cycle",
        "Laptops are replaced every three years, or sooner after a hardware fault.",
        365,
    ),
    (
        "support hours on weekends",
        "Weekend support runs 9:00-17:00 UTC with one engineer on call.",
        130,
    ),
]
# Stored today, marked important, about none of the queries.
FILLERS = [
    "The staging VPN password was rotated this morning; the new one is in the vault.",
    "Deploy version 2.3.1 to production now.",
    "Remember: the CEO's flight lands at 18:00 today.",
    "Urgent: renew the TLS certificate of the status page before it expires.",
    "Security review of the mobile app starts tomorrow at 9.",
    "The on-call rotation changed: Sam covers tonight.",
    "Disk usage on the log cluster is at 91 percent.",
    "Rotate the SSH keys of the build agents this week.",
    "Freeze all merges to main until the release is cut.",
    "The incident postmortem is due by Friday.",
    "New hire starts Monday; prepare an account and a laptop bag.",
    "The marketing site goes down for maintenance at midnight.",
]
WORD = re.compile(r"[a-z0-9]+")


def shares_a_word(query: str, text: str) -> bool:
    stop = {
        "the",
        "a",
        "of",
        "is",
        "do",
        "we",
        "on",
        "for",
        "in",
        "at",
        "to",
        "which",
        "who",
        "when",
        "where",
        "are",
        "our",
        "what",
    }
    return bool((set(WORD.findall(query.lower())) - stop) & set(WORD.findall(text.lower())))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=ROOT / "var" / "bench-distractors")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with service_stack(args.data_dir, http=False) as stack:
        from django.test import override_settings

        from ledger.services import agent_create
        from memory.episodic.services import MemoryDraft, memories_store
        from memory.search.selectors import memories_search

        tenant, _ = stack.tenant_with_admin_key(slug="bench-distractors")
        agent = agent_create(tenant=tenant, name="distractors", actor="bench")
        drafts = [
            MemoryDraft(content=fact, occurred_at=NOW - timedelta(days=age), importance=0.4)
            for _, fact, age in FACTS
        ] + [
            MemoryDraft(content=text, occurred_at=NOW - timedelta(hours=i), importance=0.9)
            for i, text in enumerate(FILLERS)
        ]
        stored = memories_store(agent=agent, drafts=drafts, actor="bench")
        fact_ids = [m.pk for m in stored[: len(FACTS)]]
        texts = {m.pk: m.content for m in stored}
        summary = {}
        for gate in (False, True):
            ranks, fillers_above = [], []
            print(f"\n## relevance gate {'on' if gate else 'off'} (default weights)")
            print("| query | rank of its fact | results sharing no word above it |")
            print("|---|---|---|")
            with override_settings(SEARCH_RELEVANCE_GATE=gate):
                for (query, _, _), fact in zip(FACTS, fact_ids, strict=True):
                    outcome = memories_search(
                        agent=agent, query=query, top_k=10, now=NOW, record_retrieval=False
                    )
                    ids = [h.id for h in outcome.hits]
                    rank = ids.index(fact) + 1 if fact in ids else None
                    above = ids[: (rank - 1) if rank else len(ids)]
                    fill = sum(not shares_a_word(query, texts[i]) for i in above if i in texts)
                    ranks.append(rank)
                    fillers_above.append(fill)
                    print(f"| {query} | {rank or '-'} | {fill} |")
            first = sum(r == 1 for r in ranks) / len(ranks)
            mrr = statistics.mean(1 / r if r else 0.0 for r in ranks)
            summary[gate] = (first, mrr, sum(fillers_above))
            print(
                f"fact first: {first:.2f}; MRR {mrr:.3f}; fillers above a fact: "
                f"{sum(fillers_above)}"
            )
    print("\n| relevance gate | fact first | MRR | fillers above a fact |")
    print("|---|---|---|---|")
    for gate, (first, mrr, fill) in summary.items():
        print(f"| {'on' if gate else 'off'} | {first:.2f} | {mrr:.3f} | {fill} |")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
