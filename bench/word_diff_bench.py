#!/usr/bin/env python3
"""The review flow's word diff (trust/pages/diffs.py): CPU time per diff of two override texts.

    python bench/word_diff_bench.py            # --words 3300 --runs 7

Texts of ``--words`` words (about 20,000 characters at 3,300, the API's limit for an override's
text) drawn from a 2,000-word vocabulary: a decision that edits 10% of the output's words, one
that rewrites it all (unrelated texts, the worst case for the matcher), and the same two from a
20-word vocabulary (many repeated words); and real prose (the first 20,000 characters of
docs/dashboards.md) with 5% of its words replaced, where the words the diff marks are counted
against those replaced. Prints the median CPU time of ``--runs`` diffs each.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trust.pages.diffs import word_diff


def _median_cpu(before: str, after: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        word_diff(before, after)
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--words", type=int, default=3300)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(20)
    for vocabulary in (2000, 20):
        words = [f"w{i}" for i in range(vocabulary)]
        output = [rng.choice(words) for _ in range(args.words)]
        edited = [w if rng.random() > 0.1 else rng.choice(words) for w in output]
        rewritten = [rng.choice(words) for _ in range(args.words)]
        text = " ".join(output)
        for name, other in (("10% of words edited", edited), ("rewritten", rewritten)):
            seconds = _median_cpu(text, " ".join(other), args.runs)
            print(
                f"{args.words} words, vocabulary {vocabulary}, {name}: "
                f"median {seconds * 1000:.1f} ms CPU ({len(text):,} characters)"
            )

    prose = (Path(__file__).resolve().parent.parent / "docs" / "dashboards.md").read_text()[:20000]
    tokens = prose.split(" ")
    replaced = [rng.random() < 0.05 for _ in tokens]
    edited_prose = " ".join("EDITED" if r else t for t, r in zip(tokens, replaced, strict=True))
    seconds = _median_cpu(prose, edited_prose, args.runs)
    diff = word_diff(prose, edited_prose)
    print(
        f"prose, {len(tokens):,} words, {sum(replaced)} replaced: median {seconds * 1000:.1f} ms "
        f"CPU; marked {diff.removed} removed, {diff.added} added"
    )


if __name__ == "__main__":
    main()
