"""The fleet's callback: verify Bulkhead's signature, drop re-sent deliveries, dispatch by type.

Deliveries are at least once: a worker killed mid-send sends again under the same webhook-id,
so a delivery whose id was handled already is answered 200 and not handled again.
"""

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from bulkhead_client.events import NOTIFICATION_TYPES, Notification
from bulkhead_client.responses import AnswerOut

__all__ = ["CallbackReceiver", "Reply"]

Handler = Callable[[Notification], None]


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any] = field(default_factory=dict)


class CallbackReceiver:
    """Handlers by notification type; `handle(headers, body)` for any framework, or the
    receiver itself as a WSGI app:

    >>> receiver = CallbackReceiver(secret="whsec_...")   # the fleet's callback secret
    >>> @receiver.on("task.ready")
    ... def ready(note): print(note.data["task"])
    """

    def __init__(self, secret: str, *, remember: int = 10_000) -> None:
        self.webhook = Webhook(secret)
        self.handlers: dict[str, list[Handler]] = {}
        self.remember = remember
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.lock = threading.Lock()
        self.answered = threading.Condition(self.lock)
        self.answers: dict[int, AnswerOut] = {}
        self.on("escalation.answered")(self._keep_answer)

    def on(self, *types: str) -> Callable[[Handler], Handler]:
        """Register a handler for these notification types (`"*"`: every type)."""
        for type in types:
            if type != "*" and type not in NOTIFICATION_TYPES:
                raise ValueError(f"{type!r} is not a notification; one of {NOTIFICATION_TYPES}")

        def register(handler: Handler) -> Handler:
            for type in types:
                self.handlers.setdefault(type, []).append(handler)
            return handler

        return register

    def handle(self, headers: Mapping[str, str], body: bytes) -> Reply:
        """Verify, dedupe and dispatch one delivery; the reply to send back."""
        lowered = {k.lower(): v for k, v in headers.items()}
        try:
            self.webhook.verify(body, lowered, json_parse=False)
        except (WebhookVerificationError, ValueError, UnicodeDecodeError):
            return Reply(401, {"errors": [{"loc": "webhook-signature", "msg": "does not verify"}]})
        webhook_id = lowered["webhook-id"]
        with self.lock:
            if webhook_id in self.seen:
                return Reply(200, {"duplicate": True})
            self.seen[webhook_id] = None
            while len(self.seen) > self.remember:
                self.seen.popitem(last=False)
        try:
            envelope = json.loads(body)
            note = Notification.model_validate({"id": webhook_id, **envelope})
            for handler in [*self.handlers.get(note.type, []), *self.handlers.get("*", [])]:
                handler(note)
        except Exception:
            with self.lock:  # not handled: Bulkhead sends it again, and it is handled then
                self.seen.pop(webhook_id, None)
            raise
        return Reply(200, {"handled": note.type})

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        """The receiver as a WSGI app (any path, POST)."""
        if environ.get("REQUEST_METHOD") != "POST":
            reply = Reply(405, {"errors": [{"loc": "method", "msg": "POST notifications"}]})
        else:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            headers = {
                key[5:].replace("_", "-").lower(): value
                for key, value in environ.items()
                if key.startswith("HTTP_")
            }
            try:
                reply = self.handle(headers, body)
            except Exception:
                reply = Reply(500, {"errors": [{"loc": "handler", "msg": "failed; send again"}]})
        payload = json.dumps(reply.body).encode()
        reason = {200: "OK", 401: "Unauthorized", 405: "Method Not Allowed"}.get(
            reply.status, "Error"
        )
        start_response(
            f"{reply.status} {reason}",
            [("content-type", "application/json"), ("content-length", str(len(payload)))],
        )
        return [payload]

    # The answers heard, for `RunHandle.wait_for_answer(..., receiver=...)`.

    def _keep_answer(self, note: Notification) -> None:
        data = note.data
        answer = AnswerOut.model_validate(
            {"text": data["answer"], "by": str(data.get("by", "")), "at": note.timestamp}
        )
        with self.answered:
            self.answers[int(data["escalation"])] = answer
            self.answered.notify_all()

    def answer_for(self, escalation: int) -> AnswerOut | None:
        with self.lock:
            return self.answers.get(escalation)

    def wait_for_answer(self, escalation: int, timeout: float) -> AnswerOut | None:
        with self.answered:
            self.answered.wait_for(lambda: escalation in self.answers, timeout)
            return self.answers.get(escalation)
