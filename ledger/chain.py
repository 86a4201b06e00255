"""The hash chain: how an event's hash is computed from its fields and its predecessor's hash.

The serialisation is canonical JSON (sorted keys, no insignificant whitespace, UTF-8) of the
event's fields with ``created_at`` in ISO 8601 UTC with microseconds. Changing it would break every
existing chain, so it is versioned by the ``v`` field.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

CHAIN_FORMAT_VERSION = 1


# One encoder, built once: json.dumps with options builds a new encoder on every call.
_canonical_encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    return _canonical_encoder.encode(value)


def event_hash(
    *,
    tenant_id: int,
    seq: int,
    run_id: str,
    round_id: str,
    turn: int,
    actor: str,
    kind: str,
    payload: Any,
    created_at: datetime,
    prev_hash: str,
) -> str:
    """SHA-256 of the canonical JSON of the event.

    The document is written out key by key in sorted order rather than built as a dict and
    sorted on every call: verification hashes millions of events, and this is its hot loop. The
    result is byte-identical to ``canonical_json`` of the same document (a test holds it so).
    """
    document = "".join(
        (
            '{"actor":',
            _dumps(actor),
            ',"created_at":"',
            created_at.astimezone(UTC).isoformat(timespec="microseconds"),
            '","kind":',
            _dumps(kind),
            ',"payload":',
            canonical_json(payload),
            ',"prev_hash":',
            _dumps(prev_hash),
            ',"round_id":',
            _dumps(round_id),
            ',"run_id":',
            _dumps(run_id),
            ',"seq":',
            str(int(seq)),
            ',"tenant":',
            str(int(tenant_id)),
            ',"turn":',
            str(int(turn)),
            ',"v":',
            str(CHAIN_FORMAT_VERSION),
            "}",
        )
    )
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


_dumps = _canonical_encoder.encode
