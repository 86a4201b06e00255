#!/usr/bin/env python3
"""How often the current fact outranks the stale one, before and after supersession (issue 22).

    .venv/bin/python bench/supersession.py [--folds 5] [--seed 22] [--no-held-out]

Reads bench/data/supersession_chains.txt: 45 chains of changing facts (preferences, roles,
plans, dates, facts; 2 or 3 statements each, the last one current) with a question each and a
distractor per chain (a true fact sharing words or topic with it, which must not be superseded).
Every chain is stored for one agent through ``memories_store`` with the local embedder: the
first statements and the distractors on day 0, each later statement 30 days after the one
before, the chains interleaved. Then each question is searched (agent memory, top 10, as of a
day after the last statement) and the chain counts as right when its current statement is
found and ranks above every stale one of its chain (a stale one left out counts as below).

Conditions, each on a fresh agent of the same embedded database:

* off: ``CONSOLIDATION_MODE=off`` (what the service did before issue 22);
* explicit: each later statement is stored with ``supersedes=[the one before]``;
* rule: ``CONSOLIDATION_MODE=apply`` with the rule's threshold chosen by k-fold
  cross-validation over the chains: a propose pass at threshold -1 records every pair the rule
  would supersede and their cosine; per fold the threshold that gets most training chains
  exactly right (stale ones superseded, current and distractor left valid; ties to the higher,
  safer threshold) is applied in a real apply run and only the held-out chains are scored;
* rule at the threshold chosen on all chains (the settings default).

Then bench/data/supersession_heldout.txt (20 chains written after the rule's words and checks
were fixed on the first set, never used to change them) is run off, explicit and under apply at
that threshold: the figure to expect on facts the rule has not seen.

Also printed: wrongly superseded statements (current ones and distractors), and what share of a
store's wall time consolidation takes (timed around ``consolidation_plan`` in the same stores).
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _setup import django_setup

DATA = Path(__file__).resolve().parent / "data" / "supersession_chains.txt"
HELD_OUT = Path(__file__).resolve().parent / "data" / "supersession_heldout.txt"
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
STEP = timedelta(days=30)
TOP_K = 10
GRID = [round(0.30 + 0.025 * i, 3) for i in range(27)]  # 0.30 .. 0.95


@dataclass
class Chain:
    number: int
    category: str
    query: str
    statements: list[str]
    distractor: str
    # Filled by a run: memory ids of the statements and of the distractor.
    ids: list[int] = field(default_factory=list)
    distractor_id: int = 0


def chains_load(path: Path = DATA) -> list[Chain]:
    chains: list[Chain] = []
    block: dict[str, Any] = {}
    for raw in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        line = raw.strip()
        if line.startswith("#"):
            continue
        if not line:
            if block:
                chains.append(
                    Chain(
                        number=len(chains),
                        category=block["category"],
                        query=block["query"],
                        statements=[block[k] for k in sorted(block) if k.isdigit()],
                        distractor=block["distractor"],
                    )
                )
                block = {}
            continue
        key, _, value = line.partition(": ")
        block[key] = value
    return chains


@dataclass
class Run:
    right: dict[int, bool]
    top1: dict[int, bool]
    superseded: set[int]
    # (new id, old id, cosine) the rule proposed or applied.
    pairs: list[tuple[int, int, float]]
    store_ms: list[float]
    # Of which consolidation (neighbours read and judged) took, per store.
    plan_ms: list[float]


def run(chains: list[Chain], *, mode: str, threshold: float = 0.6, explicit: bool = False) -> Run:
    """Store every chain for a fresh agent under these settings, then ask every question."""
    from django.conf import settings

    from ledger.models import Agent, Tenant
    from memory.episodic import services
    from memory.episodic.services import MemoryDraft, memories_store
    from memory.models import Memory
    from memory.search.selectors import memories_search

    settings.CONSOLIDATION_MODE = mode
    settings.CONSOLIDATION_SIMILARITY_THRESHOLD = threshold
    settings.CONSOLIDATION_LLM_URL = ""
    tenant = Tenant.objects.get_or_create(slug="bench-supersession", defaults={"name": "bench"})[0]
    agent = Agent.objects.create(
        tenant=tenant, name=f"facts-{mode}-{threshold}-{explicit}-{time.time_ns()}"
    )
    pairs: list[tuple[int, int, float]] = []
    store_ms: list[float] = []
    plan_ms: list[float] = []
    planned = vars(services)["consolidation_plan"]

    def timed_plan(**kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return planned(**kwargs)
        finally:
            plan_ms.append((time.perf_counter() - started) * 1000)

    vars(services)["consolidation_plan"] = timed_plan

    def store(content: str, when: datetime, supersedes: tuple[int, ...] = ()) -> int:
        started = time.perf_counter()
        memory = memories_store(
            agent=agent,
            drafts=[MemoryDraft(content=content, occurred_at=when, supersedes=supersedes)],
            actor="bench",
        )[0]
        store_ms.append((time.perf_counter() - started) * 1000)
        if memory.consolidation is not None:
            pairs.extend(
                (memory.pk, c.id, c.similarity)
                for c in memory.consolidation.candidates
                if c.similarity is not None
            )
        return memory.pk

    for chain in chains:
        chain.ids = []
    longest = max(len(chain.statements) for chain in chains)
    for stage in range(longest):
        for offset, chain in enumerate(chains):
            if stage >= len(chain.statements):
                continue
            when = START + stage * STEP + timedelta(minutes=offset)
            if stage == 0:
                chain.distractor_id = store(chain.distractor, when - timedelta(hours=1))
            before = (chain.ids[-1],) if explicit and chain.ids else ()
            chain.ids.append(store(chain.statements[stage], when, before))
    moment = START + longest * STEP + timedelta(days=1)
    right, top1 = {}, {}
    for chain in chains:
        hits = memories_search(
            agent=agent,
            query=chain.query,
            top_k=TOP_K,
            sources=("agent_memory",),
            now=moment,
            record_retrieval=False,
        ).hits
        ranked = [hit.id for hit in hits]
        current, stale = chain.ids[-1], chain.ids[:-1]
        rank = ranked.index(current) if current in ranked else None
        stale_ranks = [ranked.index(s) for s in stale if s in ranked]
        right[chain.number] = rank is not None and all(rank < s for s in stale_ranks)
        top1[chain.number] = bool(ranked) and ranked[0] == current
    vars(services)["consolidation_plan"] = planned
    superseded = set(
        Memory.objects.filter(agent=agent, superseded_by__isnull=False).values_list("pk", flat=True)
    )
    return Run(
        right=right,
        top1=top1,
        superseded=superseded,
        pairs=pairs,
        store_ms=store_ms,
        plan_ms=plan_ms,
    )


def chain_exact(chain: Chain, superseded: set[int]) -> bool:
    """Stale statements superseded, the current one and the distractor not."""
    stale_closed = all(s in superseded for s in chain.ids[:-1])
    return (
        stale_closed and chain.ids[-1] not in superseded and chain.distractor_id not in superseded
    )


def simulated(pairs: list[tuple[int, int, float]], threshold: float) -> set[int]:
    return {old for _, old, similarity in pairs if similarity >= threshold}


def threshold_chosen(chains: list[Chain], pairs: list[tuple[int, int, float]]) -> float:
    def exact(threshold: float) -> int:
        closed = simulated(pairs, threshold)
        return sum(chain_exact(chain, closed) for chain in chains)

    return max(GRID, key=lambda t: (exact(t), t))


def wrong(chains: list[Chain], superseded: set[int]) -> tuple[int, int]:
    current = sum(chain.ids[-1] in superseded for chain in chains)
    distractors = sum(chain.distractor_id in superseded for chain in chains)
    return current, distractors


def share(flags: dict[int, bool], numbers: list[int] | None = None) -> str:
    chosen = list(flags) if numbers is None else numbers
    hits = sum(flags[n] for n in chosen)
    return f"{hits}/{len(chosen)} = {hits / len(chosen):.3f}"


def outcome(chains: list[Chain], result: Run) -> str:
    current, distractors = wrong(chains, result.superseded)
    stale = sum(len(c.statements) - 1 for c in chains)
    closed = sum(s in result.superseded for c in chains for s in c.ids[:-1])
    return (
        f"current above stale {share(result.right)}; top-1 {share(result.top1)}; stale "
        f"superseded {closed}/{stale}; wrongly superseded {current} current, {distractors} "
        "distractors"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument(
        "--no-held-out", dest="held_out", action="store_false", help="skip the held-out set"
    )
    args = parser.parse_args()
    django_setup()
    chains = chains_load()
    statements = sum(len(c.statements) for c in chains)
    print(
        f"{len(chains)} chains ({statements} statements, {statements - len(chains)} changes) "
        f"+ {len(chains)} distractors; "
        + ", ".join(
            f"{c}: {sum(ch.category == c for ch in chains)}"
            for c in sorted({ch.category for ch in chains})
        )
    )
    print(f"CPU load before: {Path('/proc/loadavg').read_text().split()[:3]}")

    off = run(chains, mode="off")
    print(
        f"\noff (before issue 22): current above stale {share(off.right)}; top-1 {share(off.top1)}"
    )
    explicit = run(chains, mode="off", explicit=True)
    print(
        f"explicit supersedes: current above stale {share(explicit.right)}; "
        f"top-1 {share(explicit.top1)}"
    )

    proposals = run(chains, mode="propose", threshold=-1.0)
    pairs = proposals.pairs
    # The chains with the propose pass's memory ids, which its pairs name.
    proposed = copy.deepcopy(chains)
    order = list(range(len(chains)))
    random.Random(args.seed).shuffle(order)
    folds = [order[i :: args.folds] for i in range(args.folds)]
    held_right: dict[int, bool] = {}
    held_top1: dict[int, bool] = {}
    held_wrong = [0, 0]
    print(
        f"\nrule, {args.folds}-fold cross-validation of the threshold (grid {GRID[0]}..{GRID[-1]}):"
    )
    for number, fold in enumerate(folds, start=1):
        training = [proposed[n] for n in order if n not in fold]
        threshold = threshold_chosen(training, pairs)
        applied = run(chains, mode="apply", threshold=threshold)
        for n in fold:
            held_right[n] = applied.right[n]
            held_top1[n] = applied.top1[n]
        held = [chains[n] for n in fold]
        current, distractors = wrong(held, applied.superseded)
        held_wrong[0] += current
        held_wrong[1] += distractors
        print(
            f"  fold {number}: threshold {threshold:.3f}; held-out current above stale "
            f"{share(applied.right, fold)}, wrongly superseded: {current} current, "
            f"{distractors} distractors"
        )
    print(
        f"rule, held out: current above stale {share(held_right)}; top-1 {share(held_top1)}; "
        f"wrongly superseded {held_wrong[0]} current and {held_wrong[1]} distractors "
        f"of {len(chains)} each"
    )

    final = threshold_chosen(proposed, pairs)
    chosen = run(chains, mode="apply", threshold=final)
    print(f"rule at the threshold chosen on all chains ({final:.3f}, the default): ", end="")
    print(outcome(chains, chosen))
    if args.held_out:
        later = chains_load(HELD_OUT)
        print(
            f"\nheld-out set ({len(later)} chains written after the rule was fixed, never used "
            f"to change it), threshold {final:.3f}:"
        )
        for label, kwargs in (
            ("off", {"mode": "off"}),
            ("explicit", {"mode": "off", "explicit": True}),
            ("rule (apply)", {"mode": "apply", "threshold": final}),
        ):
            print(f"  {label}: {outcome(later, run(later, **kwargs))}")
    plan_share = [p / t for p, t in zip(chosen.plan_ms, chosen.store_ms, strict=True)]
    print(
        f"\nstore under apply, {len(chosen.store_ms)} stores of one run: median "
        f"{statistics.median(chosen.store_ms):.1f} ms wall, of which consolidation (neighbours "
        f"read and judged) {statistics.median(chosen.plan_ms):.1f} ms, a median share of "
        f"{statistics.median(plan_share):.2f}; off, another run: "
        f"{statistics.median(off.store_ms):.1f} ms"
    )
    print(f"CPU load after: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
