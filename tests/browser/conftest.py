"""Browser fixtures: Debian's Chromium driven by Playwright, screenshots, a loopback receiver."""

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

# The Playwright sync API runs an event loop in this thread; Django's ORM calls from the test
# body are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    path = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
    if not Path(path).exists():
        from tests.conftest import needs

        needs(f"Chromium at {path}", False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def expect():
    """Playwright's `expect`, imported when a test runs, as Chromium is launched."""
    from playwright.sync_api import expect

    return expect


class Screen:
    """A browser context of its own (one person), with CSP violations and errors collected."""

    def __init__(self, browser: Any, base_url: str) -> None:
        self.context = browser.new_context(
            base_url=base_url, viewport={"width": 1280, "height": 900}
        )
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on("console", self.console)
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))

    def console(self, message: Any) -> None:
        text = message.text
        if any(f"status of {code}" in text for code in (409, 422)):
            return  # a refusal the desk renders (who answered first, what is missing)
        if message.type == "error" or "Content Security Policy" in text:
            where = message.location or {}
            self.problems.append(
                f"console {message.type} on {self.page.url} "
                f"({where.get('url', '')}:{where.get('lineNumber', '')}): {text}"
            )

    def shot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def sign_in(self, username: str, password: str) -> None:
        self.page.goto("/escalations/")
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Sign in").click()


@pytest.fixture
def screens(chromium: Any, live_server: Any, settings: Any) -> Iterator[Any]:
    settings.DESK_POLL_SECONDS = 1
    opened: list[Screen] = []

    def open_screen() -> Screen:
        screen = Screen(chromium, live_server.url)
        opened.append(screen)
        return screen

    yield open_screen
    for screen in opened:
        screen.context.close()


class Receiver:
    """A fleet's callback endpoint on loopback: records every notification it is sent."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with outer.lock:
                    outer.received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of_type(self, type: str) -> list[dict[str, Any]]:
        with self.lock:
            return [n for n in self.received if n["type"] == type]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
