from __future__ import annotations

import socket
import threading

import pytest
from django.core.exceptions import ImproperlyConfigured

from memory.context import tokens
from memory.context.tokens import token_count, truncate_to_tokens

# Counts (and ids, in the comments) from tiktoken itself with OpenAI's published vocabularies.
KNOWN_COUNTS = [
    # text, o200k_base, cl100k_base
    ("Hello, world!", 4, 4),  # o200k [13225, 11, 2375, 0], cl100k [9906, 11, 1917, 0]
    ("The quick brown fox jumps over the lazy dog.", 10, 10),
    ("日本語のテキスト 🚀", 8, 11),
    ("tiktoken is great!", 6, 6),  # OpenAI's cookbook example: 6 tokens in cl100k_base
    ("", 0, 0),
]


@pytest.mark.parametrize(("text", "o200k", "cl100k"), KNOWN_COUNTS)
def test_it_counts_like_o200k_base_by_default(text, o200k, cl100k):
    assert token_count(text) == o200k


@pytest.mark.parametrize(("text", "o200k", "cl100k"), KNOWN_COUNTS)
def test_it_counts_like_cl100k_base_when_configured(settings, text, o200k, cl100k):
    settings.TOKENIZER_ENCODING = "cl100k_base"
    assert tokens.encoding().name == "cl100k_base"
    assert token_count(text) == cl100k


def test_it_counts_special_token_text_as_plain_text():
    assert token_count("<|endoftext|>") == 7


def test_it_refuses_an_unknown_encoding(settings):
    settings.TOKENIZER_ENCODING = "gpt2"
    with pytest.raises(ImproperlyConfigured, match="TOKENIZER_ENCODING"):
        token_count("hello")


def test_it_loads_offline_from_the_package(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("the tokenizer tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    # Empty caches, so only files shipped inside the wheel can be used.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("QUICKTOK_DATA", str(tmp_path / "quicktok"))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    monkeypatch.setattr(tokens, "_loaded", {})

    assert token_count("Hello, world!") == 4
    assert list(tmp_path.iterdir()) == []


def test_it_loads_the_encoding_once_for_concurrent_callers(monkeypatch):
    monkeypatch.setattr(tokens, "_loaded", {})
    seen = []
    barrier = threading.Barrier(4)

    def load():
        barrier.wait()
        seen.append(tokens.encoding())

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(seen) == 4
    assert all(found is seen[0] for found in seen)


def test_truncate_returns_short_text_unchanged():
    assert truncate_to_tokens("Hello, world!", 4) == "Hello, world!"


def test_truncate_keeps_a_prefix_of_at_most_the_limit():
    text = "The quick brown fox jumps over the lazy dog."
    assert truncate_to_tokens(text, 4) == "The quick brown fox"
    assert token_count(truncate_to_tokens(text, 4)) == 4


def test_truncate_drops_a_character_split_between_tokens():
    # The rocket emoji is two tokens in o200k_base ([169883, 222]); half of it is no character.
    text = "日本語のテキスト 🚀"
    cut = truncate_to_tokens(text, 7)
    assert cut == "日本語のテキスト "
    assert "\ufffd" not in cut


def test_truncate_to_zero_is_empty():
    assert truncate_to_tokens("anything", 0) == ""
