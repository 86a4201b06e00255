"""Sealing memory content inside ledger events (crypto-shredding).

Each memory gets its own Fernet key (AES-128-CBC with HMAC-SHA256, from the ``cryptography``
package). The ``memory.*`` events carry the content sealed with it, so the ledger alone can
rebuild the memory table, while deleting the key makes the content in the ledger unreadable for
good: that is how a data-subject deletion coexists with an append-only log.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken


class SealBroken(Exception):
    """The sealed content cannot be opened with this key."""


def key_new() -> str:
    return Fernet.generate_key().decode("ascii")


def seal(*, key: str, document: dict[str, Any]) -> str:
    plaintext = json.dumps(document, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return Fernet(key.encode("ascii")).encrypt(plaintext).decode("ascii")


def unseal(*, key: str, sealed: str) -> dict[str, Any]:
    try:
        plaintext = Fernet(key.encode("ascii")).decrypt(sealed.encode("ascii"))
    except (InvalidToken, ValueError) as exc:
        raise SealBroken(str(exc)) from exc
    document = json.loads(plaintext)
    if not isinstance(document, dict):
        raise SealBroken("sealed content is not an object")
    return document
