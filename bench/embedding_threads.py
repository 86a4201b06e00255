"""How many threads one short text's embedding should run on (memory.embeddings.local_embedder), and
what a second onnxruntime session for it would cost in memory.

    python bench/embedding_threads.py               # 400 query-length texts, about 10 s
    python bench/embedding_threads.py --busy 1      # with one spinning process beside it

A search embeds one query of a few words. onnxruntime can split each operator of that run over
both cores, or run it on one. Both embedders below are the service's own LocalEmbedder, built
with 1 and with 2 intra-op threads, timed alternately on the same texts in the same
process (the order swapped every text), so the machine's noise falls on both alike; the
process's resident memory is read before and after each is built. ``--busy``
starts processes that spin on a core each, the way other services on a shared machine do.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

from _setup import ROOT, percentile

sys.path.insert(0, str(ROOT))

WORDS = [
    "budget",
    "planning",
    "meeting",
    "travel",
    "report",
    "review",
    "deadline",
    "quarterly",
    "forecast",
    "garden",
    "key",
    "hid",
    "stone",
    "butler",
    "revenue",
    "cloud",
    "sales",
    "moved",
    "Boston",
    "sister",
    "birthday",
    "dinner",
    "Friday",
]


def resident_megabytes() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def spin(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--busy", type=int, default=0, help="spinning processes beside it")
    args = parser.parse_args()

    import numpy as np

    from memory.embeddings.local_embedder import LocalEmbedder

    rng = np.random.default_rng(7)
    texts = [" ".join(rng.choice(WORDS, int(rng.integers(3, 9)))) for _ in range(args.texts)]
    embedders: dict[int, LocalEmbedder] = {}
    grown: dict[int, float] = {}
    for threads in (2, 1):
        before = resident_megabytes()
        embedders[threads] = LocalEmbedder(threads=threads)
        for text in texts[:20]:  # warm-up, which also allocates the session's buffers
            embedders[threads].embed([text])
        grown[threads] = resident_megabytes() - before
    spinners = [
        multiprocessing.Process(target=spin, args=(time.monotonic() + 600,), daemon=True)
        for _ in range(args.busy)
    ]
    for process in spinners:
        process.start()
    timings: dict[int, list[float]] = {threads: [] for threads in embedders}
    # CPU of the whole process (both of onnxruntime's threads): what one text costs the machine,
    # which bounds the requests per second of a saturated server more than its latency does.
    cpu: dict[int, float] = dict.fromkeys(embedders, 0.0)
    try:
        for number, text in enumerate(texts):
            order = (1, 2) if number % 2 else (2, 1)
            for threads in order:
                started, cpu_started = time.perf_counter(), time.process_time()
                embedders[threads].embed([text])
                timings[threads].append((time.perf_counter() - started) * 1000)
                cpu[threads] += time.process_time() - cpu_started
    finally:
        for process in spinners:
            process.terminate()
    print(
        f"{args.texts} texts of 3-8 words, one at a time; {args.busy} spinning processes; "
        f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}; cpus {os.cpu_count()}"
    )
    for threads, values in timings.items():
        print(
            f"  {threads} thread{'s' if threads > 1 else ' '}: p50 {statistics.median(values):6.2f}"
            f"  p95 {percentile(values, 0.95):6.2f}  max {max(values):6.2f} ms;"
            f"  CPU {cpu[threads] * 1000 / len(values):6.2f} ms per text"
        )
    ratio = statistics.median(timings[1]) / statistics.median(timings[2])
    tail = percentile(timings[1], 0.95) / percentile(timings[2], 0.95)
    print(f"  1 thread / 2 threads: p50 {ratio:.2f}x, p95 {tail:.2f}x")
    print(
        f"  resident memory added by the first session {grown[2]:.0f} MB, by a second one "
        f"{grown[1]:.0f} MB"
    )


if __name__ == "__main__":
    main()
