"""Builders for routing tests: a fleet's pools, rules and due times, and a loopback chat receiver."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from escalations.services import routing
from fleet.models import Fleet


def pool(fleet: Fleet, name: str, *usernames: str) -> Any:
    return routing.pool_set(fleet=fleet, name=name, usernames=list(usernames))


def route(fleet: Fleet, pool_name: str, **conditions: Any) -> Any:
    return routing.route_add(fleet=fleet, pool=pool_name, **conditions)


def due(fleet: Fleet, minutes: int, **match: str) -> Any:
    return routing.due_set(fleet=fleet, minutes=minutes, **match)


class ChatReceiver:
    """An incoming-webhook endpoint on loopback, as Apprise's json:// posts to it.

    `script` holds statuses to answer with, in order (then 200); each answer comes `slowly`
    seconds after the request (until the receiver is closed)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.script: list[int] = []
        self.slowly = 0.0
        self.closed = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with outer.lock:
                    outer.received.append(json.loads(body))
                    status = outer.script.pop(0) if outer.script else 200
                outer.closed.wait(outer.slowly)
                try:
                    self.send_response(status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender gave up waiting

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        """The Apprise URL of this receiver: json:// is any incoming webhook that takes JSON."""
        return f"json://127.0.0.1:{self.port}/chat"

    def messages(self) -> list[str]:
        with self.lock:
            return [r.get("message", "") for r in self.received]


def chat_receiver() -> Iterator[ChatReceiver]:
    found = ChatReceiver()
    yield found
    found.closed.set()
    found.server.shutdown()
    found.server.server_close()
