"""A loopback stand-in for Bulkhead: it records each request and answers from a script."""

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # 24 bytes, base64


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Answer = tuple[int, dict[str, str], Any]  # status, headers, JSON body


class FakeBulkhead:
    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.script: list[Answer | Callable[[Seen], Answer]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("content-length", 0))
                seen = Seen(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                fake.seen.append(seen)
                step = fake.script.pop(0) if fake.script else (202, {}, {"event": "e", "type": "t"})
                status, headers, body = step(seen) if callable(step) else step
                payload = json.dumps(body).encode()
                if "Date" in headers:  # the server's clock, as the script says
                    self.send_response_only(status)
                else:
                    self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_POST = do_GET = answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def endpoint(self) -> str:
        return f"{self.base}/hooks/v1/agents/agent-1/events"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeBulkhead]:
    found = FakeBulkhead()
    yield found
    found.stop()


class Sleeps(list[float]):
    """Records each wait instead of sleeping (no test waits on the clock)."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def secret() -> str:
    return SECRET
