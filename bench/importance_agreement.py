"""How often the store-time importance heuristic agrees with hand labels (issue 22, item 7).

Reads bench/data/importance_labelled.tsv (210 lines, label<TAB>text, labels low / neutral / high;
the set the rules were tuned on) and bench/data/importance_heldout.tsv (90 lines written after
the tuning and never used for it), scores
each line as the store service does when the client gives neither type nor importance (type
inferred from the text as a user's message, then ``importance_estimate``), puts the score in a
band and prints the agreement, a confusion table and the lines it got wrong.

    .venv/bin/python bench/importance_agreement.py [--data PATH ...] [--quiet]

Pure Python over the policies module: no database, no network, a second or less.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from memory.episodic.policies import (
    importance_band,
    importance_estimate,
    memory_type_infer,
)

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_DATA = [DATA / "importance_labelled.tsv", DATA / "importance_heldout.tsv"]
LABELS = ("low", "neutral", "high")


def labelled_lines(path: Path) -> list[tuple[str, str]]:
    lines = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip() or raw.startswith("#"):
            continue
        label, _, text = raw.partition("\t")
        if label not in LABELS or not text:
            raise SystemExit(f"{path}:{number}: expected 'low|neutral|high<TAB>text'")
        lines.append((label, text))
    return lines


def predicted(text: str) -> tuple[str, float]:
    memory_type = memory_type_infer(content=text, role="user", metadata={})
    score = importance_estimate(content=text, role="user", memory_type=memory_type, metadata={})
    return importance_band(score), score


def agreement_report(path: Path, *, quiet: bool) -> None:
    lines = labelled_lines(path)
    confusion: Counter[tuple[str, str]] = Counter()
    wrong = []
    for label, text in lines:
        band, score = predicted(text)
        confusion[(label, band)] += 1
        if band != label:
            wrong.append((label, band, score, text))
    agreed = sum(confusion[(label, label)] for label in LABELS)
    counts = Counter(label for label, _ in lines)

    print(
        f"{path.name}: {len(lines)} lines (" + ", ".join(f"{counts[x]} {x}" for x in LABELS) + ")"
    )
    print(f"agreement: {agreed}/{len(lines)} = {agreed / len(lines):.3f}")
    print("labelled \\ predicted   " + "  ".join(f"{b:>7}" for b in LABELS))
    for label in LABELS:
        row = "  ".join(f"{confusion[(label, band)]:>7}" for band in LABELS)
        print(f"{label:<22}{row}")
    if not quiet:
        for label, band, score, text in wrong:
            print(f"  {label:>7} -> {band:<7} {score:.3f}  {text}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, nargs="+", default=DEFAULT_DATA)
    parser.add_argument("--quiet", action="store_true", help="omit the list of disagreements")
    args = parser.parse_args()
    for path in args.data:
        agreement_report(path, quiet=args.quiet)


if __name__ == "__main__":
    main()
