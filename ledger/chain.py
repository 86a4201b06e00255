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


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
    document = {
        "v": CHAIN_FORMAT_VERSION,
        "tenant": tenant_id,
        "seq": seq,
        "run_id": run_id,
        "round_id": round_id,
        "turn": turn,
        "actor": actor,
        "kind": kind,
        "payload": payload,
        "created_at": created_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "prev_hash": prev_hash,
    }
    return hashlib.sha256(canonical_json(document).encode("utf-8")).hexdigest()
