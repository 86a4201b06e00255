"""A local stand-in for OpenAI-compatible endpoints (embeddings, chat completions).

Tests never call a real outside service; they start this server on 127.0.0.1 instead. Its
embeddings are a deterministic bag of hashed words, so texts sharing words are similar.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def hashed_bag_of_words(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for word in text.lower().split():
        bucket = int(hashlib.sha256(word.encode()).hexdigest(), 16) % dimensions
        vector[bucket] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


@dataclass
class StandIn:
    url: str
    dimensions: int = 16
    fail_with: int | None = None
    # What the embeddings endpoint answers for a text, instead of the bag of words.
    vector_of: Callable[[str], list[float]] | None = None
    chat_reply: str = "I learned that the butler lied about the key."
    # What the chat endpoint answers for a request body, instead of chat_reply.
    chat_reply_of: Callable[[dict[str, Any]], str] | None = None
    # Seconds the chat endpoint waits before answering (a slow model, for timeouts).
    chat_delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)

    def embed(self, text: str) -> list[float]:
        if self.vector_of is not None:
            return self.vector_of(text)
        return hashed_bag_of_words(text, self.dimensions)


@contextmanager
def openai_standin(dimensions: int = 16) -> Iterator[StandIn]:
    state = StandIn(url="", dimensions=dimensions)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(
                {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
            )
            if state.fail_with is not None:
                self.send_response(state.fail_with)
                self.end_headers()
                return
            if self.path.endswith("/embeddings"):
                answer: dict[str, Any] = {
                    "data": [
                        {"index": i, "embedding": state.embed(text)}
                        for i, text in enumerate(body["input"])
                    ]
                }
            elif self.path.endswith("/chat/completions"):
                time.sleep(state.chat_delay)
                reply = state.chat_reply_of(body) if state.chat_reply_of else state.chat_reply
                answer = {"choices": [{"message": {"role": "assistant", "content": reply}}]}
            else:
                self.send_response(404)
                self.end_headers()
                return
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
