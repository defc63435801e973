"""The Python client against a live Bulkhead (gunicorn, PostgreSQL, a real worker): signing, an
idempotent retry through a lost answer (503), a 409's blockers as `Blocked`, evidence hashed as
the server hashes it (its verifier re-runs the query and finds the same hash), an answer received
by the callback receiver and by polling."""

import json
import sqlite3
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from django.test import Client

from bulkhead_client import Blocked, Bulkhead, CallbackReceiver, Packet, Refused, RuledOut, Task
from bulkhead_client.evidence import query
from fleet import services
from fleet.models import Event
from fleet.stories import all_green
from runs.claims.hashing import payload_hash as server_payload_hash
from runs.models import Claim
from tests.clients.conftest import credentials
from tests.clients.proxy import LosingProxy
from tests.conftest import eventually

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

COLUMNS = "SELECT name AS column_name FROM pragma_table_info('customers') ORDER BY cid"


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def receiver_url():
    """The fleet's callback: the client's receiver as a WSGI app on loopback."""
    found = {}
    server = make_server("127.0.0.1", 0, lambda e, s: found["receiver"](e, s), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/bulkhead", found
    server.shutdown()
    server.server_close()


def test_the_python_client_runs_a_task_through_a_live_bulkhead(live_app, receiver_url, tmp_path):
    url, slot = receiver_url
    fleet = services.fleet_create(name="acme", callback_url=url)
    receiver = slot["receiver"] = CallbackReceiver(fleet.callback_secret)
    heard = []
    receiver.on("task.ready", "escalation.opened")(
        lambda note: heard.append((note.type, note.task))
    )
    orch = credentials(live_app, fleet, "orch", orchestrator=True)
    credentials(live_app, fleet, "planner")
    credentials(live_app, fleet, "coder")
    orders = tmp_path / "orders.sqlite3"
    all_green.build_orders(orders)
    services.source_add(fleet=fleet, kind="datasource", name="orders", value=str(orders))

    # The first answer is lost after Bulkhead applied the event: the client sends it again.
    proxy = LosingProxy(
        live_app.url, lambda path, headers, body: b"run.started" in body and not proxy.seen
    )
    try:
        bh = Bulkhead(
            endpoint=orch.endpoint.replace(live_app.url, proxy.url),
            secret=orch.secret,
            token=orch.token,
        )
        run = bh.declare_run(
            "r1",
            [Task(key="plan", agent="planner"), Task(key="code", agent="coder", prerequisites=["plan"]),
             Task(key="ask", agent="planner")],
            title="Client end to end",
        )  # fmt: skip
    finally:
        proxy.stop()
    first, again = proxy.seen
    assert (first.upstream_status, first.answered, again.upstream_status, again.answered) == (
        202,
        503,
        202,
        202,
    )
    assert (first.headers["webhook-id"], first.headers["webhook-timestamp"], first.body) == (
        again.headers["webhook-id"], again.headers["webhook-timestamp"], again.body
    )  # fmt: skip
    assert Event.objects.filter(webhook_id=first.headers["webhook-id"]).count() == 1

    bh = Bulkhead(endpoint=orch.endpoint, secret=orch.secret, token=orch.token)
    run = bh.run("r1")
    assert set(run.frontier().ready) == {"plan", "ask"}
    with pytest.raises(Blocked) as blocked:
        run.start("code", prompt_hash="p", context_hash="c", agent="coder")
    assert blocked.value.status == 409 and blocked.value.blockers == ["prerequisite:plan"]

    # The planner's claim carries the query it ran: the worker re-runs it and gets the same hash.
    db = sqlite3.connect(orders)
    evidence = query(db, COLUMNS, datasource="orders")
    assert evidence.payload_hash == server_payload_hash(evidence.payload)
    with run.task("plan", prompt_hash="p1", context_hash="c1", agent="planner") as attempt:
        posted = attempt.claim(
            "plan.points", "`customers.loyalty_points` holds the points", evidence=evidence
        )
        assert posted.get("status") == "unverified"  # until the worker re-checks it
        attempt.artifact("pr", "acme/shop#1")
    eventually(lambda: Claim.objects.get(key="plan.points").status == "verified")
    assert run.detail().claim("plan.points").status == "verified"
    assert "code" in run.frontier().ready
    eventually(lambda: ("task.ready", "code") in heard, what="task.ready for code at the receiver")

    # A refusal carries the server's errors.
    with pytest.raises(Refused) as refused:
        run.claim("nope", "k", "s", agent="planner")
    assert refused.value.status == 422 and any(
        e["loc"] == "data.task" for e in refused.value.errors
    )

    # The planner stops on "ask" with a packet; a reviewer answers; the client hears it.
    with run.task("ask", prompt_hash="p", context_hash="c", agent="planner") as attempt:
        accepted = attempt.escalate(
            Packet(
                task="ask",
                tried=["looked for a tier column"],
                ruled_out=[RuledOut(hypothesis="a tier column", how="read the customers columns")],
                evidence=[evidence],
                smallest_unblocking_question="Where does a customer's tier come from?",
            )
        )
    escalation = accepted.get("escalation")
    assert [row.id for row in run.escalations()] == [escalation]
    assert run.detail().task("ask").escalation.id == escalation
    eventually(lambda: ("escalation.opened", "ask") in heard)

    alice, _ = services.member_add(username="alice", fleet=fleet, role="reviewer")
    browser = Client()
    browser.force_login(alice)
    answer = "Use the loyalty_points threshold in pricing-config.yaml"
    assert browser.post(f"/escalations/{escalation}/answer/", {"text": answer}).status_code == 302

    heard_answer = run.wait_for_answer(escalation, receiver=receiver, timeout=30)
    polled = run.wait_for_answer(escalation, timeout=30, interval=0.2)
    assert heard_answer.text == polled.text == answer and polled.by == "alice"
    [row] = run.escalations()
    assert (row.status, row.answer.text) == ("answered", answer)
    assert answer in json.dumps(run.context("ask").ground_truth)
