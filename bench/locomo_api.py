#!/usr/bin/env python3
"""LoCoMo dev retrieval through the real service: HTTP in, HTTP out (issue 4).

    python bench/locomo_api.py                        # 5 conversations, 997 questions, two passes
    python bench/locomo_api.py --limit-questions 100 --conversations conv-26   # a quick look

Starts a private stack under var/bench-locomo-api (embedded PostgreSQL + Redis, migrations,
gunicorn serving config.wsgi on a free local port; see bench/_service.py), makes a tenant and an
admin API key through the services, then only speaks HTTP:

* one agent per conversation (POST /api/v1/agents/);
* each turn one memory (POST /api/v1/memories/batch/, one batch per conversation): content = the
  turn text plus " [shares a photo of <caption>]" when the turn has an image, session_id = the
  session, occurred_at = the session's date and time, metadata = {"speaker", "dia_id"};
* each question one search (POST /api/v1/memories/search/, top_k 10) of its conversation's
  agent; the ranking is the returned list, an agent_memory hit counting as the turn named by its
  details.metadata.dia_id and any other source's hit as a miss in its place.

Two passes: the service's default weights, and relevance only (similarity 1, recency, importance
and source priority 0). ``--no-speaker`` stores the turns without speaker metadata (content only,
as many clients store memories). ``--mixed-ingest N`` adds a third pass: the default-weights
searches again while another client stores LoCoMo turns for another agent at N memories/s
(batches of ``--mixed-batch``, each sent when it is due by one of ``--mixed-connections``
connections, as an ingest pipeline's workers would), with the embedder's own rate on the same
texts measured in process just before, so the ingest's share of it and the search latency under
ingest print next to the quiet pass's. A Celery worker runs beside gunicorn as under
``make up`` (a batch's consolidation and the events' embeddings are its work); the searches
start once it is idle, and the mixed pass prints when it became idle after the ingest. Metrics
as in docs/retrieval-research.md (same evidence clean-up, printed below): R@1/5/10, MRR,
nDCG@10, overall and per category; latency is the client's HTTP round trip (query embedding
included), next to the server's own took_ms. Targets: R@10 >= 0.80, p95 <= 50 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _locomo import (
    CATEGORIES,
    DEFAULT_DATA,
    METRICS,
    Conversation,
    MetricSums,
    limit_questions,
    load_locomo,
    memory_drafts,
    ranking_metrics,
)
from _service import ApiClient, background_drained, celery_worker, service_stack
from _setup import ROOT, bench_summary, json_option_add, load_bar, percentile

# Measured on this file by others (data README, docs/retrieval-research.md): printed for context.
BASELINES_R10 = (
    ("BM25 over turn text", 0.573),
    ('BM25 over "[date] speaker: text"', 0.616),
    ("DRAGON (LoCoMo paper, dialog level, its own 50-conversation set)", 0.675),
)
TARGET_R10 = 0.80
TARGET_P95_MS = 50.0
TOP_K = 10
WARM_UP_QUERIES = 5
RELEVANCE_ONLY: dict[str, float] = {
    "similarity": 1,
    "recency": 0,
    "importance": 0,
    "source_priority": 0,
}


def expect(status: int, body: Any, wanted: int, what: str) -> None:
    if status != wanted:
        raise SystemExit(f"{what}: HTTP {status} (expected {wanted}): {body}")


@dataclass(frozen=True)
class Agent:
    id: int
    name: str


def load_conversation(
    api: ApiClient, conv: Conversation, batch: int, *, speaker: bool = True
) -> tuple[Agent, float]:
    """Create the conversation's agent and store its turns; returns it and the seconds taken."""
    name = f"locomo-{conv.sample_id}"
    status, body, _ = api.post("/api/v1/agents/", {"name": name})
    expect(status, body, 201, f"creating agent {name}")
    agent = Agent(int(body["id"]), name)
    drafts = memory_drafts(conv, speaker=speaker)
    started = time.perf_counter()
    for offset in range(0, len(drafts), batch):
        chunk = drafts[offset : offset + batch]
        status, body, _ = api.post("/api/v1/memories/batch/", {"agent": name, "memories": chunk})
        expect(status, body, 201, f"storing {len(chunk)} memories of {name}")
        if len(body["memories"]) != len(chunk):
            raise SystemExit(f"{name}: stored {len(body['memories'])} of {len(chunk)} memories")
    return agent, time.perf_counter() - started


@dataclass
class PassResult:
    name: str
    overall: MetricSums = field(default_factory=MetricSums)
    per_category: dict[int, MetricSums] = field(
        default_factory=lambda: {k: MetricSums() for k in CATEGORIES}
    )
    client_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    other_sources: int = 0  # hits in the top 10 that were not agent memories
    without_dia_id: int = 0  # agent-memory hits whose metadata had no dia_id (should be 0)
    not_semantic: int = 0  # answers that say the embedder was not used
    candidates: list[int] = field(default_factory=list)  # server-side candidates per search


def search_body(agent: Agent, query: str, weights: dict[str, float] | None) -> dict[str, Any]:
    # The contract names the agent by id; the endpoint as written reads its name, like the rest
    # of the memory API. Both are sent (a serializer ignores fields it does not know).
    body: dict[str, Any] = {
        "agent_id": agent.id,
        "agent": agent.name,
        "query": query,
        "top_k": TOP_K,
    }
    if weights is not None:
        body["weights"] = weights
    return body


def run_pass(
    api: ApiClient,
    convs: list[Conversation],
    agents: dict[str, Agent],
    name: str,
    weights: dict[str, float] | None,
) -> PassResult:
    result = PassResult(name)
    questions = [(conv, q) for conv in convs for q in conv.questions]
    for conv, q in questions[:WARM_UP_QUERIES]:
        status, body, _ = api.post(
            "/api/v1/memories/search/", search_body(agents[conv.sample_id], q.text, weights)
        )
        expect(status, body, 200, "warm-up search")
    for conv, q in questions:
        status, body, elapsed = api.post(
            "/api/v1/memories/search/", search_body(agents[conv.sample_id], q.text, weights)
        )
        expect(status, body, 200, f"search {q.text!r}")
        result.client_ms.append(elapsed)
        result.server_ms.append(float(body["took_ms"]))
        result.not_semantic += not body.get("semantic", True)
        if "candidates" in body:
            result.candidates.append(int(body["candidates"]))
        ranked: list[str | None] = []
        for hit in body["results"]:
            if hit["source"] != "agent_memory":
                result.other_sources += 1
                ranked.append(None)
                continue
            dia_id = ((hit.get("details") or {}).get("metadata") or {}).get("dia_id")
            result.without_dia_id += dia_id is None
            ranked.append(dia_id)
        values = ranking_metrics(ranked, q.evidence)
        result.overall.add(values)
        result.per_category[q.category].add(values)
    return result


class Ingest:
    """Stores memories for one agent through the batch API at a steady offered rate until
    stopped: batch n is due ``n * batch / rate`` seconds after the start, and is sent then by
    whichever of ``connections`` clients is free (so a batch answered slower than its interval
    does not slow the next ones, as it would with one client waiting for each answer; with
    every client busy, batches wait for one). Keeps what it stored and how long each request
    took."""

    def __init__(
        self,
        stack: Any,
        key: str,
        agent: str,
        items: list[dict[str, Any]],
        rate: float,
        batch: int,
        connections: int,
    ) -> None:
        self.agent, self.items, self.batch = agent, items, batch
        self.interval = batch / rate
        self.halt = threading.Event()
        self.stored = 0
        self.request_ms: list[float] = []
        self.seconds = 0.0
        self.failures: Counter[str] = Counter()  # "status: error code" of each failed request
        self._next = 0
        self._lock = threading.Lock()
        self._clients = [
            threading.Thread(target=self._client, args=(stack.client(key),), daemon=True)
            for _ in range(connections)
        ]

    def start(self) -> None:
        self._started = time.perf_counter()
        for client in self._clients:
            client.start()

    def stop(self) -> None:
        self.halt.set()
        for client in self._clients:
            client.join()
        self.seconds = time.perf_counter() - self._started

    def _client(self, api: ApiClient) -> None:
        try:
            while True:
                with self._lock:
                    number, self._next = self._next, self._next + 1
                if self.halt.wait(
                    max(0.0, self._started + number * self.interval - time.perf_counter())
                ):
                    return
                # Each text once, never one the server embedded before: its vector cache holds
                # the conversations stored for the searches, and a repeated text costs nothing.
                offset = number * self.batch
                chunk = [
                    ingest_copy(self.items[(offset + k) % len(self.items)], offset + k)
                    for k in range(self.batch)
                ]
                status, body, elapsed = api.post(
                    "/api/v1/memories/batch/", {"agent": self.agent, "memories": chunk}
                )
                with self._lock:
                    if status == 201:
                        self.stored += len(chunk)
                        self.request_ms.append(elapsed)
                    else:
                        error = body.get("error") if isinstance(body, dict) else None
                        code = error.get("code", "") if isinstance(error, dict) else ""
                        self.failures[f"{status} {code}".strip()] += 1
        finally:
            api.close()


def ingest_copy(item: dict[str, Any], number: int) -> dict[str, Any]:
    """The ingest's ``number``-th memory: a LoCoMo turn made a text of its own."""
    return {**item, "content": f"{item['content']} (#{number})"}


def raw_embedder_rate(items: list[dict[str, Any]], batch: int, count: int = 300) -> float:
    """Memories/s of the service's embedder alone on texts like the ingest's, in batches of
    ``batch`` (what the ingest's requests carry). The backend itself, not ``embed_texts``:
    its cache would answer texts seen before for free."""
    from datetime import datetime

    from memory.embeddings.backends import embedder
    from memory.episodic.services import memory_embedding_text

    embed = embedder().embed
    items = [ingest_copy(item, -1 - number) for number, item in enumerate(items[:count])]

    texts = [
        memory_embedding_text(
            content=item["content"],
            role="user",
            metadata=item["metadata"],
            when=datetime.fromisoformat(item["occurred_at"]),
        )
        for item in items
    ]
    embed(texts[:batch])  # warm
    started = time.perf_counter()
    for offset in range(0, len(texts), batch):
        embed(texts[offset : offset + batch])
    return len(texts) / (time.perf_counter() - started)


def metric_row(label: str, sums: MetricSums) -> str:
    cells = " | ".join(f"{sums.mean(key):.3f}" if sums.n else "  -  " for key in METRICS)
    return f"| {label:22} | {sums.n:4} | {cells} |"


def report(result: PassResult, weights: dict[str, float] | None) -> None:
    print(f"\n## {result.name}: weights {weights or 'service defaults'}")
    print(f"| {'questions':22} |    n | R@1   | R@5   | R@10  | MRR   | nDCG@10 |")
    print(f"|{'-' * 24}|------|-------|-------|-------|-------|---------|")
    print(metric_row("all", result.overall))
    for number, label in CATEGORIES.items():
        print(metric_row(f"{number} {label}", result.per_category[number]))
    client, server = result.client_ms, result.server_ms
    print(
        f"search latency over {len(client)} questions: client round trip p50 "
        f"{statistics.median(client):.1f} ms, p95 {percentile(client, 0.95):.1f} ms, max "
        f"{max(client):.1f} ms; server took_ms p50 {statistics.median(server):.1f} ms, p95 "
        f"{percentile(server, 0.95):.1f} ms"
    )
    if result.candidates:
        print(
            f"candidates ranked by the server per search: median "
            f"{statistics.median(result.candidates):.0f}, max {max(result.candidates)}"
        )
    print(
        f"hits from other sources in the top {TOP_K}: {result.other_sources}; agent-memory hits "
        f"without a dia_id: {result.without_dia_id}; answers with semantic=false: "
        f"{result.not_semantic}"
    )
    r10, p95 = result.overall.mean("r10"), percentile(client, 0.95)
    print(
        f"targets: R@10 {r10:.3f} {'>=' if r10 >= TARGET_R10 else '<'} {TARGET_R10:.2f} "
        f"({'met' if r10 >= TARGET_R10 else 'NOT met'}); client p95 {p95:.1f} ms "
        f"{'<=' if p95 <= TARGET_P95_MS else '>'} {TARGET_P95_MS:.0f} ms "
        f"({'met' if p95 <= TARGET_P95_MS else 'NOT met'})"
    )


def server_errors_print(stack: Any) -> None:
    """The server log's tracebacks: the data folder (and the log in it) is gone after the run
    unless --keep, and a failed request's cause is in them."""
    log = stack.data_dir / "logs" / "gunicorn.log"
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    starts = [n for n, line in enumerate(lines) if line.startswith("Traceback")]
    print(f"server errors ({len(starts)} tracebacks in {log}):")
    for start in starts[-3:]:
        end = next((n for n in range(start + 1, len(lines)) if not lines[n].startswith(" ")), start)
        print("\n".join(lines[max(start - 1, 0) : end + 1]))


def mixed_pass(
    stack: Any,
    api: ApiClient,
    convs: list[Conversation],
    agents: dict[str, Agent],
    args: argparse.Namespace,
    quiet: PassResult,
) -> PassResult:
    """The default-weights searches again while another client ingests at a steady rate."""
    items = [
        {**draft, "session_id": f"{conv.sample_id}/{draft['session_id']}"}
        for conv in convs
        for draft in memory_drafts(conv, speaker=not args.no_speaker)
        if "occurred_at" in draft
    ]
    raw = raw_embedder_rate(items, args.mixed_batch)
    status, body, _ = api.post("/api/v1/agents/", {"name": "ingest"})
    expect(status, body, 201, "creating the ingest agent")
    ingest = Ingest(
        stack, api.key, "ingest", items, args.mixed_ingest, args.mixed_batch,
        args.mixed_connections,
    )  # fmt: skip
    ingest.start()
    time.sleep(2.0)  # the ingest reaches its pace before the searches start
    name = f"default weights, {args.mixed_ingest:.0f} memories/s ingest running"
    try:
        result = run_pass(api, convs, agents, name, None)
    finally:
        ingest.stop()
    drained = background_drained()
    report(result, None)
    if ingest.failures:
        server_errors_print(stack)
    achieved = ingest.stored / ingest.seconds
    print(
        f"ingest during the pass: {ingest.stored} memories in {ingest.seconds:.1f} s = "
        f"{achieved:.0f}/s (asked {args.mixed_ingest:.0f}/s on up to {args.mixed_connections} "
        f"connections, {sum(ingest.failures.values())} failed requests"
        f"{f' {dict(ingest.failures)}' if ingest.failures else ''}; "
        f"request p50 {statistics.median(ingest.request_ms):.0f} ms, p95 "
        f"{percentile(ingest.request_ms, 0.95):.0f} ms); the embedder alone on the same texts "
        f"in batches of {args.mixed_batch}: {raw:.0f}/s, so the ingest ran at "
        f"{achieved / min(raw, args.mixed_ingest):.0%} of what the embedder allows at the "
        f"asked rate; the worker's part of the ingest done {drained:.1f} s after its last request"
    )
    q95, m95 = percentile(quiet.client_ms, 0.95), percentile(result.client_ms, 0.95)
    print(
        f"search client p95 quiet {q95:.1f} ms, under ingest {m95:.1f} ms (ratio {m95 / q95:.2f});"
        f" p50 {statistics.median(quiet.client_ms):.1f} -> "
        f"{statistics.median(result.client_ms):.1f} ms; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "var" / "bench-locomo-api")
    parser.add_argument("--conversations", help="comma-separated sample ids (default: all)")
    parser.add_argument("--limit-questions", type=int, help="about N questions in all")
    parser.add_argument(
        "--workers", type=int, default=2, help="gunicorn worker processes (2, as make up runs)"
    )
    parser.add_argument("--batch", type=int, default=1000, help="memories per batch request")
    parser.add_argument("--keep", action="store_true", help="keep the data folder afterwards")
    parser.add_argument(
        "--no-speaker", action="store_true", help="store no speaker metadata (content only)"
    )
    parser.add_argument(
        "--mixed-ingest",
        type=float,
        default=0.0,
        help="memories/s stored during a third search pass (0: no such pass)",
    )
    parser.add_argument("--mixed-batch", type=int, default=10, help="memories per ingest request")
    parser.add_argument(
        "--mixed-connections",
        type=int,
        default=4,
        help="the ingest's clients: batches sent at once at most (an ingest pipeline's workers)",
    )
    json_option_add(parser)
    args = parser.parse_args()
    with bench_summary(as_json=args.json, name="locomo_api") as summary:
        locomo_measure(args, summary)


def locomo_measure(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    convs, evidence = load_locomo(args.data)
    if args.conversations:
        wanted = set(args.conversations.split(","))
        convs = [c for c in convs if c.sample_id in wanted]
    limit_questions(convs, args.limit_questions)
    print(
        f"LoCoMo dev: {len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns, "
        f"{sum(len(c.questions) for c in convs)} questions scored ({args.data}); speaker "
        f"metadata {'NOT stored (--no-speaker)' if args.no_speaker else 'stored'}"
    )
    for line in evidence.lines():
        print("  evidence:", line)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    with (
        service_stack(args.data_dir, workers=args.workers, keep=args.keep) as stack,
        celery_worker(stack),
    ):
        print(
            f"service: gunicorn gthread, {args.workers} worker(s), {stack.base_url}; one Celery "
            "worker"
        )
        api = stack.client(stack.admin_key(slug="bench-locomo"))
        agents: dict[str, Agent] = {}
        stored, seconds = 0, 0.0
        bar = load_bar(total=sum(len(c.turns) for c in convs), description="store", unit="turn")
        for conv in convs:
            agents[conv.sample_id], took = load_conversation(
                api, conv, args.batch, speaker=not args.no_speaker
            )
            stored += len(conv.turns)
            seconds += took
            bar.update(len(conv.turns))
        bar.close()
        drained = background_drained()
        summary["stored"] = {"memories": stored, "seconds": seconds, "drained_s": drained}
        print(
            f"stored {stored} memories through POST /api/v1/memories/batch/ in {seconds:.1f} s "
            f"({stored / seconds:.0f} memories/s, embedding included); the worker's part "
            f"(each batch's consolidation, the events' embeddings) done {drained:.1f} s later"
        )
        passes = [("default weights", None), ("relevance only", RELEVANCE_ONLY)]
        results = []
        for name, weights in passes:
            result = run_pass(api, convs, agents, name, weights)
            results.append(result)
            report(result, weights)
        if args.mixed_ingest:
            results.append(mixed_pass(stack, api, convs, agents, args, results[0]))
        api.close()
    print("\nR@10 side by side:")
    for result in results:
        print(f"  service, {result.name:38} {result.overall.mean('r10'):.3f}")
        summary[result.name] = {key: result.overall.mean(key) for key in METRICS}
    for label, value in BASELINES_R10:
        print(f"  baseline, {label:37} {value:.3f}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
