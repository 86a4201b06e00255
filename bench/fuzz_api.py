#!/usr/bin/env python3
"""The long API fuzzing run: tests/test_fuzz_api.py and tests/test_fuzz_inputs.py with many more
cases and fresh randomness.

    python bench/fuzz_api.py                      # 50 generated cases per operation and key
    python bench/fuzz_api.py --examples 200 -- -x # more; arguments after -- go to pytest

The bounded run inside ``make test`` uses 1 derandomized case per operation (plus schemathesis's
boundary cases) and 3 per operation and input class (lone surrogates and NUL, deep nesting,
impossible date-times, tampered cursors, vectors without a direction, backtracking regexes);
this one draws new cases on every run, on its own embedded PostgreSQL and Redis under
var/test-fuzz, then prints what the schemathesis half sent (cases, answers by status, keys) from
the run's summary file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _setup import ROOT

DATA_DIR = ROOT / "var" / "test-fuzz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=50, help="cases per operation and key")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()

    env = {
        **os.environ,
        "AGENT_MEMORY_DATA_DIR": str(DATA_DIR),
        "FUZZ_MAX_EXAMPLES": str(args.examples),
        "FUZZ_RANDOM": "1",
        # Every boundary case, not the bounded run's sample (tests/test_fuzz_api.py).
        "FUZZ_BOUNDARY_SAMPLE_EVERY": "1",
    }
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*command, "tests/test_fuzz_api.py", "tests/test_fuzz_inputs.py", *args.pytest_args],
        cwd=ROOT,
        env=env,
        check=False,
    )
    seconds = time.monotonic() - started
    summary = DATA_DIR / "logs" / "fuzz-summary.json"
    if summary.exists():
        tally = json.loads(summary.read_text())
        cases = tally.get("cases", 0)
        print(f"\n{cases} requests in {seconds:.0f} s, {args.examples} cases per operation")
        print(json.dumps(tally))
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
