"""A loopback proxy in front of the live app that loses the answer to chosen requests: it
forwards the request (Bulkhead applies it) and answers the client 503 with Retry-After."""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass
class Forwarded:
    path: str
    headers: dict[str, str]
    body: bytes
    upstream_status: int
    answered: int


class LosingProxy:
    def __init__(self, upstream: str, lose: Callable[[str, dict[str, str], bytes], bool]) -> None:
        self.upstream = upstream
        self.lose = lose
        self.seen: list[Forwarded] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                forward = {k: v for k, v in headers.items() if k not in ("host", "content-length")}
                answer = httpx.request(
                    self.command, proxy.upstream + self.path, content=body, headers=forward
                )
                lost = proxy.lose(self.path, headers, body)
                status = 503 if lost else answer.status_code
                proxy.seen.append(Forwarded(self.path, headers, body, answer.status_code, status))
                payload = b'{"errors":[{"loc":"proxy","msg":"lost"}]}' if lost else answer.content
                self.send_response(status)
                if lost:
                    self.send_header("Retry-After", "0")
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = relay

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
