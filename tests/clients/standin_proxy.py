"""A local stand-in in front of the real server for the retry tests: it answers 503, or forwards
a request and then drops the connection before the answer, as its plan says, request by request.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FORWARD = "forward"
UNAVAILABLE = "503"
DROP_ANSWER = "drop_answer"  # forwarded (the server does the work), then the answer is lost


@dataclass
class Proxy:
    upstream_port: int
    plan: list[str] = field(default_factory=list)
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def next_action(self) -> str:
        return self.plan.pop(0) if self.plan else FORWARD


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            proxy.seen.append((self.command, self.path, self.headers.get("Idempotency-Key")))
            action = proxy.next_action()
            if action == UNAVAILABLE:
                payload = (
                    b'{"error": {"code": "service_unavailable", "message": "down", "details": {}}}'
                )
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                content = answer.read()
            finally:
                upstream.close()
            if action == DROP_ANSWER:
                self.close_connection = True
                self.connection.close()
                return
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

    return Handler


@contextmanager
def standin_proxy(upstream_port: int, plan: list[str]) -> Iterator[Proxy]:
    proxy = Proxy(upstream_port=upstream_port, plan=list(plan))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    proxy.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
