"""The callback receiver: Bulkhead's signature verified, re-sent deliveries dropped, handlers
dispatched by type; as a function and as a WSGI app."""

import io
import json
import threading
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from bulkhead_client import CallbackReceiver

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def delivery(type, data, webhook_id="msg_1", secret=SECRET):
    body = json.dumps(
        {"type": type, "timestamp": "2026-06-02T09:00:00+00:00", "data": data}
    ).encode()
    now = datetime.now(UTC)
    headers = {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(webhook_id, now, body.decode()),
    }
    return headers, body


def test_it_dispatches_each_type_to_its_handlers():
    receiver = CallbackReceiver(SECRET)
    heard = []
    receiver.on("task.ready", "task.reframed")(lambda note: heard.append((note.type, note.task)))
    receiver.on("*")(lambda note: heard.append(("any", note.id)))
    assert receiver.handle(*delivery("task.ready", {"run": "r", "task": "a"})).status == 200
    receiver.handle(
        *delivery("task.reframed", {"run": "r", "task": "b", "ground_truth": []}, "msg_2")
    )
    receiver.handle(*delivery("task.halted", {"run": "r", "task": "c"}, "msg_3"))
    assert heard == [
        ("task.ready", "a"), ("any", "msg_1"), ("task.reframed", "b"), ("any", "msg_2"), ("any", "msg_3")
    ]  # fmt: skip


def test_a_delivery_sent_again_under_its_id_is_handled_once():
    receiver = CallbackReceiver(SECRET)
    heard = []
    receiver.on("task.halted")(heard.append)
    first = receiver.handle(*delivery("task.halted", {"run": "r", "task": "a"}))
    again = receiver.handle(*delivery("task.halted", {"run": "r", "task": "a"}))
    assert (first.status, again.status, again.body) == (200, 200, {"duplicate": True})
    assert len(heard) == 1


def test_a_delivery_whose_handler_failed_is_handled_when_it_comes_again():
    receiver = CallbackReceiver(SECRET)
    calls = []

    def flaky(note):
        calls.append(note.id)
        if len(calls) == 1:
            raise RuntimeError("the orchestrator was busy")

    receiver.on("task.ready")(flaky)
    with pytest.raises(RuntimeError):
        receiver.handle(*delivery("task.ready", {"run": "r", "task": "a"}))
    assert receiver.handle(*delivery("task.ready", {"run": "r", "task": "a"})).status == 200
    assert calls == ["msg_1", "msg_1"]


def test_a_wrong_signature_is_refused_and_not_remembered():
    receiver = CallbackReceiver(SECRET)
    heard = []
    receiver.on("*")(heard.append)
    forged = delivery("task.ready", {"run": "r", "task": "a"}, secret="whsec_" + "A" * 32)
    assert receiver.handle(*forged).status == 401
    assert receiver.handle(*delivery("task.ready", {"run": "r", "task": "a"})).status == 200
    assert len(heard) == 1


def test_an_unknown_type_cannot_be_registered():
    with pytest.raises(ValueError, match="not a notification"):
        CallbackReceiver(SECRET).on("task.exploded")


def test_it_is_a_wsgi_app():
    receiver = CallbackReceiver(SECRET)
    heard = []
    receiver.on("run.succeeded")(heard.append)
    headers, body = delivery("run.succeeded", {"run": "r"})
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()},
    }
    statuses = []
    out = receiver(environ, lambda status, headers: statuses.append(status))
    assert statuses == ["200 OK"] and json.loads(b"".join(out)) == {"handled": "run.succeeded"}
    assert heard[0].run == "r"
    statuses.clear()
    receiver({"REQUEST_METHOD": "GET"}, lambda status, headers: statuses.append(status))
    assert statuses == ["405 Method Not Allowed"]


def test_an_answer_heard_wakes_whoever_waits_for_it():
    receiver = CallbackReceiver(SECRET)
    answered = {
        "escalation": 9,
        "run": "r",
        "task": "plan",
        "answer": "Use loyalty_points",
        "by": "reviewer:alice",
    }

    def later():
        time.sleep(0.05)
        receiver.handle(*delivery("escalation.answered", answered))

    threading.Thread(target=later).start()
    found = receiver.wait_for_answer(9, timeout=30)
    assert found is not None and found.text == "Use loyalty_points" and found.by == "reviewer:alice"
