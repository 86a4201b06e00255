"""What the long management commands share: a progress bar on a terminal, ``--json`` summaries.

The bar (tqdm) goes to stderr and only when stderr is a terminal, so logs, pipes and cron mail
stay free of control characters; ``--json`` prints one JSON document on stdout, the command's
summary, instead of its lines for people.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser, OutputWrapper
from tqdm import tqdm


def progress_bar(*, total: int | None, description: str, unit: str) -> tqdm[Any]:
    return tqdm(
        total=total,
        desc=description,
        unit=unit,
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
        leave=False,
        dynamic_ncols=True,
    )


def progress_print(stream: OutputWrapper, text: str) -> None:
    """A line on stdout without tearing the bar on stderr: the bar steps aside, then returns."""
    with tqdm.external_write_mode(file=sys.stderr):
        stream.write(text)


def json_option_add(parser: CommandParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="Print a machine-readable summary (one JSON document on stdout) instead of lines",
    )


def json_summary_write(command: BaseCommand, summary: dict[str, Any]) -> None:
    command.stdout.write(json.dumps(summary, indent=2, sort_keys=True, default=str))


def summary_write(
    command: BaseCommand, *, as_json: bool, summary: dict[str, Any], text: str
) -> None:
    """The command's closing words: the JSON summary with ``--json``, else ``text``."""
    if as_json:
        json_summary_write(command, summary)
    else:
        command.stdout.write(text)
