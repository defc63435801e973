"""The signed webhook intake: every row of DESIGN section 3's responses table."""

import io
import json
import time
from typing import Any

import pytest
from django.test import TestCase
from django.utils import timezone

from escalations.models import Escalation
from fleet import services
from fleet.models import Event, SigningKey
from runs.models import Prerequisite, Run, Task
from tests.conftest import Sender, make_sender, task, wsgi_headers

pytestmark = pytest.mark.django_db


def start(sender: Sender, run: str = "r1", tasks: list | None = None, **data):
    tasks = tasks if tasks is not None else [task("a"), task("b", prerequisites=["a"])]
    return sender.post("run.started", {"run": run, "title": "A run", "tasks": tasks, **data})


def a_running(planner: Sender) -> None:
    """Run r1 declared, its task a started by the coder (the orchestrator names it)."""
    start(planner)
    planner.post("task.started", {"run": "r1", "task": "a", "agent": "coder",
                                  "attempt": {"prompt_hash": "p", "context_hash": "c"}})  # fmt: skip


def test_it_accepts_a_signed_run_and_stores_its_graph(planner, coder):
    response = start(planner)
    assert response.status_code == 202, response.json()
    assert response.json()["event"]
    run = Run.objects.get(key="r1")
    assert list(run.tasks.order_by("position").values_list("key", flat=True)) == ["a", "b"]
    assert Prerequisite.objects.get().requires.key == "a"
    assert Event.objects.filter(type="run.started").count() == 1


def test_it_accepts_any_of_several_active_keys(planner, coder):
    second = SigningKey.objects.create(agent=planner.agent)
    body = planner.body("run.started", {"run": "r1", "tasks": [task("a")]})
    headers = planner.headers(body, secret=second.secret)
    assert planner.post_raw(body, headers).status_code == 202


def test_it_accepts_a_signature_list_where_one_matches(planner, coder):
    body = planner.body("run.started", {"run": "r1", "tasks": [task("a")]})
    headers = planner.headers(body)
    headers["webhook-signature"] = "v1,bm9wZQ== " + headers["webhook-signature"]
    assert planner.post_raw(body, headers).status_code == 202


def auth_failures(sender: Sender):
    body = sender.body("run.started", {"run": "r1", "tasks": []})
    good = sender.headers(body)
    revoked = SigningKey.objects.create(agent=sender.agent, active=False)
    yield "wrong secret", sender.headers(body, secret="whsec_" + "B" * 32), sender.path
    yield (
        "missing signature",
        {k: v for k, v in good.items() if k != "webhook-signature"},
        sender.path,
    )
    yield "garbled signature", {**good, "webhook-signature": "garbage"}, sender.path
    yield "old timestamp", sender.headers(body, stamp=int(time.time()) - 301), sender.path
    yield "future timestamp", sender.headers(body, stamp=int(time.time()) + 301), sender.path
    yield "revoked key", sender.headers(body, secret=revoked.secret), sender.path
    yield "unknown agent", good, "/hooks/v1/agents/00000000-0000-0000-0000-000000000000/events"
    yield "malformed agent id", good, "/hooks/v1/agents/nobody/events"


def test_every_authentication_failure_gets_the_same_401(planner, client):
    body = planner.body("run.started", {"run": "r1", "tasks": []})
    answers = set()
    for name, headers, path in auth_failures(planner):
        extra = wsgi_headers(headers)
        response = client.generic("POST", path, body, content_type="application/json", **extra)
        assert response.status_code == 401, name
        answers.add(response.content)
    assert len(answers) == 1
    assert not Run.objects.exists()


def test_a_replay_returns_the_first_response_and_applies_once(planner, coder):
    body = planner.body("run.started", {"run": "r1", "tasks": [task("a")]})
    headers = planner.headers(body, webhook_id="msg_same")
    first = planner.post_raw(body, headers)
    second = planner.post_raw(body, planner.headers(body, webhook_id="msg_same"))
    assert first.status_code == second.status_code == 202
    assert first.json() == second.json()
    assert Event.objects.count() == 1


def test_a_reused_webhook_id_with_another_body_is_409(planner, coder):
    planner.post("run.started", {"run": "r1", "tasks": [task("a")]}, webhook_id="msg_x")
    response = planner.post("run.started", {"run": "r2", "tasks": [task("a")]}, webhook_id="msg_x")
    assert response.status_code == 409
    assert response.json()["errors"][0]["loc"] == "webhook-id"
    assert "blockers" not in response.json()  # only a refused start lists blockers
    assert not Run.objects.filter(key="r2").exists()


def test_a_signed_webhook_id_over_200_characters_is_400_naming_it(planner, coder):
    body = planner.body("run.started", {"run": "r1", "tasks": [task("a")]})
    response = planner.post_raw(body, planner.headers(body, webhook_id="m" * 201))
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "errors": [{"loc": "webhook-id", "msg": "is 201 characters; at most 200"}]
    }
    assert not Run.objects.exists()
    exactly = planner.post_raw(body, planner.headers(body, webhook_id="m" * 200))
    assert exactly.status_code == 202


def test_a_signed_webhook_id_with_a_control_character_is_400(planner, coder):
    body = planner.body("run.started", {"run": "r1", "tasks": [task("a")]})
    response = planner.post_raw(body, planner.headers(body, webhook_id="msg\x00one"))
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"loc": "webhook-id", "msg": "contains a control character"}
    ]


def test_a_non_json_content_type_is_415(planner):
    body = b"run=r1"
    response = planner.post_raw(body, planner.headers(body), content_type="text/plain")
    assert response.status_code == 415
    assert response.json()["errors"][0]["loc"] == "content-type"


def test_a_body_that_is_not_json_is_400(planner):
    body = b"{not json"
    response = planner.post_raw(body, planner.headers(body))
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["errors"][0]["msg"]


def test_a_signed_body_that_is_not_utf8_is_400_not_401(planner):
    body = b'{"type": "run.started", "title": "caf\xff"}'
    response = planner.post_raw(body, planner.headers(body))
    assert response.status_code == 400
    assert response.json() == {
        "errors": [{"loc": "body", "msg": "not valid UTF-8: byte 0xff at offset 37"}]
    }


def test_a_body_that_is_not_utf8_and_not_signed_is_still_401(planner):
    body = b'{"type": "\xff"}'
    headers = planner.headers(body, secret="whsec_" + "B" * 32)
    assert planner.post_raw(body, headers).status_code == 401


def test_signatures_match_the_reference_library_both_ways(planner):
    from datetime import UTC, datetime

    from standardwebhooks.webhooks import Webhook

    from fleet import signing

    body = '{"type": "caf\u00e9 é"}'.encode()
    stamp = int(time.time())
    ours = signing.sign(planner.secret, msg_id="msg_1", timestamp=stamp, body=body)
    theirs = Webhook(planner.secret).sign(
        "msg_1", datetime.fromtimestamp(stamp, UTC), body.decode()
    )
    assert ours["webhook-signature"] == theirs
    Webhook(planner.secret).verify(body, ours)
    signing.verify([planner.secret], headers={**ours, "webhook-signature": theirs}, body=body)


def test_a_body_over_one_mebibyte_is_413(planner, coder):
    tasks = [task(f"t{i}", title="x" * 4000) for i in range(300)]
    body = planner.body("run.started", {"run": "big", "tasks": tasks})
    assert len(body) > 1024 * 1024
    response = planner.post_raw(body, planner.headers(body))
    assert response.status_code == 413
    assert not Run.objects.exists()


def test_a_packet_over_64_kib_is_413(planner, coder):
    start(planner)
    packet = {
        "task": "a",
        "tried": ["x" * 1000] * 70,
        "ruled_out": [],
        "evidence": ["y"],
        "smallest_unblocking_question": "Which?",
    }
    response = planner.post("packet.submitted", {"run": "r1", "task": "a", "packet": packet})
    assert response.status_code == 413
    assert response.json()["errors"][0]["loc"] == "data.packet"


def errors_of(response) -> dict[str, str]:
    assert response.status_code == 422, response.content
    return {e["loc"]: e["msg"] for e in response.json()["errors"]}


def test_schema_errors_name_every_bad_field(planner, coder):
    response = planner.post(
        "run.started",
        {"run": 7, "tasks": [{"key": "a", "agent": "coder", "effect": "explosive", "surprise": 1}]},
    )
    errors = errors_of(response)
    assert set(errors) == {"data.run", "data.tasks.0.effect", "data.tasks.0.surprise"}
    assert errors["data.tasks.0.surprise"] == "unknown field"


def test_an_unknown_event_type_is_named(planner):
    errors = errors_of(planner.post("run.exploded", {}))
    assert "type" in errors


def test_a_run_without_tasks_is_refused(planner):
    errors = errors_of(start(planner, tasks=[]))
    assert errors == {"data.tasks": "a run needs at least one task"}
    assert not Run.objects.exists()


def test_duplicate_task_keys_are_named(planner, coder):
    errors = errors_of(start(planner, tasks=[task("a"), task("a")]))
    assert errors == {"data.tasks.1.key": "duplicate task key 'a' (also at data.tasks.0)"}


def test_an_unknown_prerequisite_is_named(planner, coder):
    errors = errors_of(start(planner, tasks=[task("a", prerequisites=["ghost"])]))
    assert errors == {"data.tasks.0.prerequisites.0": "unknown prerequisite 'ghost'"}


def test_an_unknown_agent_in_a_task_is_named(planner):
    errors = errors_of(start(planner, tasks=[task("a", agent="nobody")]))
    assert errors == {"data.tasks.0.agent": "no agent 'nobody' in this fleet"}


def test_a_cycle_is_refused_naming_its_tasks(planner, coder):
    tasks = [
        task("a", prerequisites=["c"]),
        task("b", prerequisites=["a"]),
        task("c", prerequisites=["b"]),
        task("d"),
    ]
    errors = errors_of(start(planner, tasks=tasks))
    (msg,) = errors.values()
    assert msg.startswith("cycle: ")
    assert set(msg.removeprefix("cycle: ").split(" -> ")) == {"a", "b", "c"}
    assert not Run.objects.exists()


def test_a_nul_byte_anywhere_is_named(planner, coder):
    errors = errors_of(start(planner, tasks=[task("a", title="bad\x00title")]))
    assert errors == {"data.tasks.0.title": "contains a NUL byte"}


def test_nul_bytes_and_schema_errors_are_named_together(planner, coder):
    response = start(planner, title="a\x00", tasks=[task("a", weight="x")])
    errors = errors_of(response)
    assert errors == {
        "data.title": "contains a NUL byte",
        "data.tasks.0.weight": "Input should be a valid integer",
    }


def test_schema_and_reference_errors_are_named_together(planner, coder):
    response = start(planner, title=5, tasks=[task("a", agent="nobody", prerequisites=["ghost"])])
    assert set(errors_of(response)) == {
        "data.title",
        "data.tasks.0.agent",
        "data.tasks.0.prerequisites.0",
    }
    assert not Run.objects.exists()


def test_references_are_checked_on_the_tasks_that_parsed(planner, coder):
    tasks = [
        task("a", weight="x"),  # does not parse, but its key is still a known prerequisite
        task("b", prerequisites=["a", "ghost"]),
        task("c", agent="nobody"),
    ]
    assert errors_of(start(planner, tasks=tasks)) == {
        "data.tasks.0.weight": "Input should be a valid integer",
        "data.tasks.1.prerequisites.1": "unknown prerequisite 'ghost'",
        "data.tasks.2.agent": "no agent 'nobody' in this fleet",
    }


def test_a_cycle_is_named_with_the_other_reference_errors(planner, coder):
    tasks = [
        task("a", prerequisites=["b"]),
        task("b", prerequisites=["a"]),
        task("c", agent="nobody"),
        task("c"),
        task("d", prerequisites=["ghost"]),
    ]
    errors = errors_of(start(planner, tasks=tasks))
    assert errors == {
        "data.tasks.2.agent": "no agent 'nobody' in this fleet",
        "data.tasks.3.key": "duplicate task key 'c' (also at data.tasks.2)",
        "data.tasks.4.prerequisites.0": "unknown prerequisite 'ghost'",
        "data.tasks.0.prerequisites": "cycle: a -> b -> a",
    }


def test_a_cycle_through_a_task_that_did_not_parse_is_not_guessed(planner, coder):
    tasks = [task("a", prerequisites=["b"]), task("b", prerequisites=["a"], weight="x")]
    assert errors_of(start(planner, tasks=tasks)) == {
        "data.tasks.1.weight": "Input should be a valid integer"
    }


def test_an_added_task_with_a_bad_field_names_the_unknown_run_too(planner, coder):
    response = planner.post("tasks.added", {"run": "nope", "tasks": [task("c", weight=-1)]})
    assert set(errors_of(response)) == {"data.run", "data.tasks.0.weight"}


def test_added_tasks_are_checked_against_the_runs_graph_beside_schema_errors(planner, coder):
    start(planner)
    tasks = [task("a"), task("c", prerequisites=["b", "ghost"], effect="loud")]
    errors = errors_of(planner.post("tasks.added", {"run": "r1", "tasks": tasks}))
    assert errors == {
        "data.tasks.0.key": "task 'a' already exists in the run",
        "data.tasks.1.effect": "Input should be 'none', 'reversible' or 'external'",
    }
    tasks = [task("a", weight="x"), task("c", prerequisites=["b", "ghost"])]
    errors = errors_of(planner.post("tasks.added", {"run": "r1", "tasks": tasks}))
    assert errors == {
        "data.tasks.0.weight": "Input should be a valid integer",
        "data.tasks.0.key": "task 'a' already exists in the run",
        "data.tasks.1.prerequisites.1": "unknown prerequisite 'ghost'",
    }


def test_an_unknown_task_is_named_beside_a_schema_error(planner, coder):
    start(planner)
    response = coder.post("task.started", {"run": "r1", "task": "zzz", "attempt": {}})
    assert errors_of(response) == {
        "data.attempt.prompt_hash": "Field required",
        "data.attempt.context_hash": "Field required",
        "data.task": "unknown task 'zzz' in run 'r1'",
    }


def test_a_missing_failure_is_named_beside_a_schema_error(planner, coder):
    start(planner)
    response = coder.post(
        "task.finished", {"run": "r1", "task": "a", "outcome": "failed", "resumable": "yes"}
    )
    assert set(errors_of(response)) == {"data.failure", "data.resumable"}


def test_an_unknown_task_and_an_unknown_claim_are_named_together(planner, coder):
    start(planner)
    evidence = {"kind": "test_run", "source": "agent:planner", "payload_hash": "sha256:" + "0" * 64}
    response = coder.post(
        "claim.checked",
        {"run": "r1", "task": "zzz", "claim": "ghost", "verdict": "verified", "evidence": evidence},
    )
    assert set(errors_of(response)) == {"data.task", "data.claim", "data.evidence.source"}
    response = coder.post(
        "claim.checked",
        {"run": "r1", "task": "zzz", "claim": "ghost", "verdict": "maybe", "evidence": evidence},
    )
    assert set(errors_of(response)) == {"data.task", "data.claim", "data.verdict"}


def test_an_unknown_task_is_named_beside_the_packets_errors(planner, coder):
    start(planner)
    packet = {"task": "zzz", "tried": [], "evidence": []}
    errors = errors_of(
        coder.post("packet.submitted", {"run": "r1", "task": "zzz", "packet": packet})
    )
    assert {
        "data.task",
        "data.packet.tried",
        "data.packet.evidence",
        "data.packet.ruled_out",
        "data.packet.smallest_unblocking_question",
    } == set(errors)
    errors = errors_of(
        coder.post("packet.submitted", {"run": "r1", "task": "zzz", "packet": packet, "x": 1})
    )
    assert {"data.x", "data.task", "data.packet.tried"} <= set(errors)


def test_an_unpaired_surrogate_anywhere_is_named_not_a_500(planner, coder):
    start(planner)
    evidence = {
        "kind": "test_run",
        "source": "pytest",
        "payload_hash": "sha256:" + "0" * 64,
        "payload": {"x": "\ud800", "y\udc00": 1},
    }
    claim = {"key": "c", "statement": "s", "evidence": evidence}
    body = coder.body("claim.posted", {"run": "r1", "task": "a", "claim": claim})
    assert b"\\ud800" in body  # json.dumps escapes it; the intake decodes it back
    errors = errors_of(coder.post_raw(body, coder.headers(body)))
    unpaired = "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid Unicode"
    assert errors == {
        "data.claim.evidence.payload.x": unpaired,
        "data.claim.evidence.payload.y\\udc00": "field name " + unpaired,
    }
    assert not Event.objects.filter(type="claim.posted").exists()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_in_a_payload_is_not_json_a_400_not_a_500(planner, coder, literal):
    start(planner)
    claim = {"key": "c", "statement": "s", "evidence": {
        "kind": "query_result", "source": "SELECT 1", "payload_hash": "sha256:" + "0" * 64,
        "payload": {"columns": ["x"], "rows": [[1.5]]}}}  # fmt: skip
    body = coder.body("claim.posted", {"run": "r1", "task": "a", "claim": claim})
    body = body.replace(b"1.5", literal.encode())  # Python's reader takes these; JSON has none
    response = coder.post_raw(body, coder.headers(body))
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == [
        {"loc": "body", "msg": f"not valid JSON: {literal} is not a JSON value"}
    ]
    assert not Event.objects.filter(type="claim.posted").exists()


def test_a_number_too_large_for_a_double_is_named_not_a_500(planner, coder):
    start(planner)
    claim = {"key": "c", "statement": "s", "evidence": {
        "kind": "query_result", "source": "SELECT 1", "payload_hash": "sha256:" + "0" * 64,
        "payload": {"columns": ["x"], "rows": [[1.5]]}}}  # fmt: skip
    body = coder.body("claim.posted", {"run": "r1", "task": "a", "claim": claim})
    body = body.replace(b"1.5", b"1e999")
    errors = errors_of(coder.post_raw(body, coder.headers(body)))
    assert errors == {
        "data.claim.evidence.payload.rows.0.0": "is a number outside the range of a double"
    }
    assert not Event.objects.filter(type="claim.posted").exists()


def test_a_nul_byte_in_a_packet_is_named_with_the_packets_other_errors(planner, coder):
    start(planner)
    packet = {"task": "a", "tried": ["x\x00"], "evidence": []}
    errors = errors_of(coder.post("packet.submitted", {"run": "r1", "task": "a", "packet": packet}))
    assert errors["data.packet.tried.0"] == "contains a NUL byte"
    assert {
        "data.packet.evidence",
        "data.packet.ruled_out",
        "data.packet.smallest_unblocking_question",
    } <= set(errors)


def test_an_unknown_task_is_named(planner, coder):
    start(planner)
    response = coder.post(
        "task.started",
        {"run": "r1", "task": "zzz", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
    )
    assert errors_of(response) == {"data.task": "unknown task 'zzz' in run 'r1'"}


def test_a_packet_with_a_missing_or_unknown_field_names_each(planner, coder):
    start(planner)
    packet = {"task": "a", "tried": ["x"], "evidence": ["y"], "transcript": "..."}
    errors = errors_of(coder.post("packet.submitted", {"run": "r1", "task": "a", "packet": packet}))
    assert "data.packet.transcript" in errors
    assert "data.packet.smallest_unblocking_question" in errors


def test_a_ten_thousand_deep_chain_is_accepted(planner, coder):
    tasks = [task("t0")] + [task(f"t{i}", prerequisites=[f"t{i - 1}"]) for i in range(1, 10_000)]
    response = start(planner, run="deep", tasks=tasks)
    assert response.status_code == 202, response.content[:500]
    assert Task.objects.filter(run__key="deep").count() == 10_000


def test_declaring_the_same_run_again_is_a_no_op_and_other_tasks_are_409(planner, coder):
    assert start(planner).status_code == 202
    again = start(planner)
    assert again.status_code == 202 and again.json()["created"] is False
    other = start(planner, tasks=[task("a")])
    assert other.status_code == 409
    assert Task.objects.count() == 2


def test_declaring_the_same_run_again_with_another_policy_is_409_naming_it(planner, coder):
    assert start(planner).status_code == 202
    other = start(planner, policy="global_halt")
    assert other.status_code == 409
    assert other.json()["errors"] == [
        {"loc": "data.policy",
         "msg": "run 'r1' was already declared with policy 'scoped'; it cannot change"}
    ]  # fmt: skip
    assert Run.objects.get(key="r1").policy == "scoped"
    assert start(planner, policy="scoped").json()["created"] is False


def test_tasks_added_extend_the_graph(planner, coder):
    start(planner)
    response = planner.post("tasks.added", {"run": "r1", "tasks": [task("c", prerequisites=["b"])]})
    assert response.status_code == 202
    assert Task.objects.get(key="c").prerequisite_links.get().requires.key == "b"


def test_an_agent_over_its_rate_is_429_with_retry_after(planner, coder, settings):
    settings.AGENT_RATE_LIMIT = 2
    start(planner)
    start(planner)
    response = start(planner)
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    # Another agent has its own budget.
    assert (
        coder.post("capability.changed", {"capability": "forge", "status": "up"}).status_code == 202
    )


def test_an_agent_cannot_act_outside_its_fleet(client, planner, coder):
    start(planner)
    other_fleet = services.fleet_create(name="other")
    stranger = make_sender(client, other_fleet, "stranger")
    response = stranger.post(
        "task.started",
        {"run": "r1", "task": "a", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
    )
    assert errors_of(response) == {"data.run": "unknown run 'r1'"}
    stranger_in_tasks = start(stranger, run="r9", tasks=[task("a", agent="coder")])
    assert errors_of(stranger_in_tasks) == {"data.tasks.0.agent": "no agent 'coder' in this fleet"}


def test_only_an_orchestrator_may_act_as_another_agent(planner, coder):
    start(planner)
    as_planner = coder.post(
        "task.started",
        {
            "run": "r1",
            "task": "a",
            "agent": "planner",
            "attempt": {"prompt_hash": "p", "context_hash": "c"},
        },
    )
    assert as_planner.status_code == 403
    assert as_planner.json()["errors"][0]["loc"] == "data.agent"
    by_orchestrator = planner.post(
        "task.started",
        {
            "run": "r1",
            "task": "a",
            "agent": "coder",
            "attempt": {"prompt_hash": "p", "context_hash": "c"},
        },
    )
    assert by_orchestrator.status_code == 202
    assert Task.objects.get(key="a").attempts.get().agent == coder.agent


ATTEMPT = {"prompt_hash": "p", "context_hash": "c"}
EVIDENCE = {"kind": "test_run", "source": "pytest -q", "payload_hash": "sha256:" + "0" * 64}


def refused_as(response, msg: str) -> None:
    assert response.status_code == 403, response.content
    assert response.json() == {"errors": [{"loc": "data.task", "msg": msg}]}


def test_an_agent_may_not_start_or_finish_another_agents_task(client, planner, coder):
    start(planner)
    intruder = make_sender(client, planner.agent.fleet, "intruder", role="coding")
    not_yours = (
        "task 'a' is coder's, not intruder's; "
        "only coder (or an orchestrator naming coder in data.agent) may act on it"
    )
    response = intruder.post("task.started", {"run": "r1", "task": "a", "attempt": ATTEMPT})
    refused_as(response, not_yours)
    assert Task.objects.get(key="a").state == "pending"
    assert (
        coder.post("task.started", {"run": "r1", "task": "a", "attempt": ATTEMPT}).status_code
        == 202
    )
    finish = {"run": "r1", "task": "a", "outcome": "succeeded"}
    refused_as(intruder.post("task.finished", finish), not_yours)
    assert Task.objects.get(key="a").state == "running"
    claim = {"key": "a.done", "statement": "a is done", "evidence": EVIDENCE}
    refused_as(intruder.post("claim.posted", {"run": "r1", "task": "a", "claim": claim}), not_yours)
    assert coder.post("claim.posted", {"run": "r1", "task": "a", "claim": claim}).status_code == 202
    packet = {
        "task": "a",
        "tried": ["x"],
        "ruled_out": [],
        "evidence": [EVIDENCE],
        "smallest_unblocking_question": "Which?",
    }
    submitted = intruder.post("packet.submitted", {"run": "r1", "task": "a", "packet": packet})
    refused_as(submitted, not_yours)
    assert not Event.objects.filter(agent=intruder.agent).exists()


def test_a_check_is_made_by_the_agent_of_the_checking_task(client, planner, coder):
    start(planner, tasks=[task("a"), task("b", agent="planner", prerequisites=["a"])])
    coder.post("task.started", {"run": "r1", "task": "a", "attempt": ATTEMPT})
    claim = {"key": "a.done", "statement": "a is done", "evidence": EVIDENCE}
    coder.post("claim.posted", {"run": "r1", "task": "a", "claim": claim})
    check = {"run": "r1", "claim": "a.done", "verdict": "verified", "evidence": EVIDENCE}
    refused_as(
        coder.post("claim.checked", {**check, "task": "b"}),
        "task 'b' is planner's, not coder's; "
        "only planner (or an orchestrator naming planner in data.agent) may act on it",
    )
    assert planner.post("claim.checked", {**check, "task": "b"}).status_code == 202


def test_an_orchestrator_acts_for_another_agent_only_by_naming_it(planner, coder):
    start(planner)
    started = {"run": "r1", "task": "a", "attempt": ATTEMPT}
    refused_as(
        planner.post("task.started", started),
        "task 'a' is coder's, not planner's; to act for coder, name it in data.agent",
    )
    as_coder = planner.post("task.started", {**started, "agent": "coder"})
    assert as_coder.status_code == 202
    other = planner.post(
        "task.finished", {"run": "r1", "task": "a", "outcome": "succeeded", "agent": "planner"}
    )
    assert other.status_code == 403


def test_after_a_reroute_the_task_is_its_new_agents(client, planner, coder):
    from escalations import services as desk
    from tests.escalations.desk import member, packet

    start(planner)
    other = make_sender(client, planner.agent.fleet, "coder-2", role="coding")
    coder.post("task.started", {"run": "r1", "task": "a", "attempt": ATTEMPT})
    submitted = coder.post("packet.submitted", {"run": "r1", "task": "a", "packet": packet("a")})
    assert submitted.status_code == 202, submitted.content
    escalation = Escalation.objects.get(pk=submitted.json()["escalation"])
    alice = member("alice", planner.agent.fleet)
    with TestCase.captureOnCommitCallbacks(execute=True):
        desk.escalation_reroute(
            escalation=escalation, reviewer=alice, agent="coder-2", note="yours"
        )
    started = {"run": "r1", "task": "a", "attempt": ATTEMPT}
    refused_as(
        coder.post("task.started", started),
        "task 'a' is coder-2's, not coder's; "
        "only coder-2 (or an orchestrator naming coder-2 in data.agent) may act on it",
    )
    assert other.post("task.started", started).status_code == 202


def test_a_task_outside_the_frontier_may_not_start(planner, coder):
    start(planner)
    response = coder.post(
        "task.started",
        {"run": "r1", "task": "b", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
    )
    assert response.status_code == 409
    assert {"loc": "blockers", "msg": "prerequisite:a"} in response.json()["errors"]
    assert response.json()["blockers"] == ["prerequisite:a"]  # the same, on their own
    assert Task.objects.get(key="b").state == "pending"


def test_a_run_moves_through_start_and_finish(planner, coder):
    start(planner)
    attempt = {"prompt_hash": "p", "context_hash": "c"}
    assert (
        coder.post("task.started", {"run": "r1", "task": "a", "attempt": attempt}).status_code
        == 202
    )
    finished = coder.post("task.finished", {"run": "r1", "task": "a", "outcome": "succeeded"})
    assert finished.status_code == 202
    assert (
        coder.post("task.started", {"run": "r1", "task": "b", "attempt": attempt}).status_code
        == 202
    )
    coder.post(
        "task.finished",
        {
            "run": "r1",
            "task": "b",
            "outcome": "succeeded",
            "artifacts": [{"kind": "pr", "ref": "#1"}],
        },
    )
    assert Run.objects.get(key="r1").state == "succeeded"


def test_a_failed_outcome_needs_its_failure(planner, coder):
    start(planner)
    coder.post(
        "task.started",
        {"run": "r1", "task": "a", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
    )
    errors = errors_of(coder.post("task.finished", {"run": "r1", "task": "a", "outcome": "failed"}))
    assert errors == {"data.failure": "required when outcome is failed"}


def test_nothing_is_half_written_when_applying_fails(planner, coder):
    # The second task names an unknown agent: neither the run nor the event may remain.
    start(planner, tasks=[task("a"), task("b", agent="ghost")])
    assert not Run.objects.exists()
    assert not Event.objects.exists()


def test_the_response_body_is_json_errors_for_every_refusal(planner):
    body = json.dumps({"type": "run.started"}).encode()
    response = planner.post_raw(body, planner.headers(body))
    assert response["Content-Type"] == "application/json"
    assert {"timestamp", "data"} <= set(errors_of(response))


def run_started(stamp: object = "2026-12-02T10:00:00Z") -> bytes:
    """A run.started envelope of run r1 with one task, stamped `stamp`, as its body's bytes."""
    return json.dumps(
        {"type": "run.started", "timestamp": stamp, "data": {"run": "r1", "tasks": [task("a")]}}
    ).encode()


def post_run_started(sender: Sender, stamp: object) -> Any:
    body = run_started(stamp)
    return sender.post_raw(body, sender.headers(body))


@pytest.mark.parametrize("stamp", [1764669600, 1764669600000, 1.5, True, None])
def test_a_timestamp_that_is_not_an_iso_8601_string_is_422_naming_it(planner, stamp):
    # A number would be read as Unix seconds or milliseconds: a careless agent's guess, refused.
    response = post_run_started(planner, stamp)
    assert response.status_code == 422
    assert "ISO 8601" in errors_of(response)["timestamp"]
    assert not Run.objects.exists() and not Event.objects.exists()


@pytest.mark.parametrize(
    ("stamp", "utc"),
    [
        ("2026-12-02T12:00:00+16:00", "2026-12-01T20:00:00+00:00"),
        ("2026-12-02T12:00:00-23:59", "2026-12-03T11:59:00+00:00"),
        ("2026-12-02T12:00:00+15:59", "2026-12-01T20:01:00+00:00"),
    ],
)
def test_a_timestamp_with_any_offset_iso_8601_allows_is_stored_as_its_instant(
    planner, coder, stamp, utc
):
    # PostgreSQL stores offsets up to 15:59; ISO 8601 allows 23:59: a careless agent's clock.
    response = post_run_started(planner, stamp)
    assert response.status_code == 202, response.content
    assert Event.objects.get().occurred_at.isoformat() == utc


@pytest.mark.parametrize("stamp", ["9999-12-31T23:59:59.999999-23:59", "0001-01-01T00:00:00+23:59"])
def test_a_timestamp_outside_the_years_utc_can_hold_is_422_naming_it(planner, coder, stamp):
    response = post_run_started(planner, stamp)
    assert response.status_code == 422
    assert "outside the years 1 to 9999 once converted to UTC" in errors_of(response)["timestamp"]
    assert not Run.objects.exists() and not Event.objects.exists()


@pytest.mark.parametrize(
    ("data", "loc"),
    [
        ({"run": "r1", "title": "t" * 301, "tasks": [task("a")]}, "data.title"),
        ({"run": "r1", "tasks": [task("a", title="t" * 301)]}, "data.tasks.0.title"),
        ({"run": "r1", "tasks": [task("a", transaction="g" * 101)]}, "data.tasks.0.transaction"),
        (
            {"run": "r1", "tasks": [task("a", capabilities=["c" * 101])]},
            "data.tasks.0.capabilities.0",
        ),
        ({"run": "r/1", "tasks": [task("a")]}, "data.run"),
        ({"run": "r1", "tasks": [task("a/b")]}, "data.tasks.0.key"),
    ],
)
def test_a_value_longer_than_its_column_or_unfit_for_a_url_is_422_naming_it(
    planner, coder, data, loc
):
    response = planner.post("run.started", data)
    assert response.status_code == 422, response.content
    assert loc in [e["loc"] for e in response.json()["errors"]]
    assert not Run.objects.exists()


def test_an_over_long_capability_artifact_or_failure_field_is_422_not_500(planner, coder):
    response = planner.post(
        "capability.changed", {"capability": "c" * 101, "status": "down", "reason": "r"}
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == "data.capability"
    a_running(planner)
    response = coder.post(
        "task.finished",
        {"run": "r1", "task": "a", "outcome": "failed",
         "failure": {"kind": "transient", "signature": "s", "capability": "c" * 101},
         "artifacts": [{"kind": "k" * 51, "ref": "PR 1"}]},
    )  # fmt: skip
    assert response.status_code == 422
    locs = {e["loc"] for e in response.json()["errors"]}
    assert {"data.failure.capability", "data.artifacts.0.kind"} <= locs
    assert Task.objects.get(key="a").state == "running"


def test_a_field_sent_twice_in_one_object_is_422_naming_each(planner, coder):
    body = (
        b'{"type": "run.started", "timestamp": "2026-12-02T10:00:00Z", "data": '
        b'{"run": "r1", "run": "r2", "tasks": [{"key": "a", "key": "b", "agent": "coder"}]}}'
    )
    response = planner.post_raw(body, planner.headers(body))
    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["errors"]] == ["data.run", "data.tasks.0.key"]
    assert "more than once" in response.json()["errors"][0]["msg"]
    assert not Run.objects.exists()


def test_a_field_sent_twice_is_named_with_the_bodys_other_errors(planner, coder):
    body = (
        b'{"type": "task.finished", "timestamp": "2026-12-02T10:00:00Z", "data": '
        b'{"run": "nope", "task": "a", "task": "b", "outcome": "maybe"}}'
    )
    response = planner.post_raw(body, planner.headers(body))
    assert response.status_code == 422
    named = {e["loc"]: e["msg"] for e in response.json()["errors"]}
    assert set(named) == {"data.task", "data.outcome", "data.run"}
    assert "more than once" in named["data.task"] and "unknown run" in named["data.run"]


def test_an_envelope_naming_an_agent_is_refused_pointing_at_data_agent(planner, coder):
    body = json.dumps(
        {"type": "run.started", "timestamp": "2026-12-02T10:00:00Z", "agent": "coder",
         "data": {"run": "r1", "tasks": [task("a")]}}
    ).encode()  # fmt: skip
    response = planner.post_raw(body, planner.headers(body))
    assert response.status_code == 422
    error = response.json()["errors"][0]
    assert error["loc"] == "agent" and "data.agent" in error["msg"]
    assert not Run.objects.exists()


def test_the_same_declaration_in_another_order_or_with_repeats_is_a_no_op(planner, coder):
    tasks = [task("a"), task("b", prerequisites=["a", "a"], capabilities=["x", "y"])]
    assert start(planner, tasks=tasks).status_code == 202
    again = [task("b", prerequisites=["a"], capabilities=["y", "x"]), task("a")]
    response = start(planner, tasks=again)
    assert response.status_code == 202, response.json()
    assert response.json()["created"] is False
    assert start(planner, tasks=tasks).json()["created"] is False


def test_the_first_declaration_again_after_tasks_were_added_is_a_no_op(planner, coder):
    assert start(planner).status_code == 202
    added = planner.post("tasks.added", {"run": "r1", "tasks": [task("c", prerequisites=["b"])]})
    assert added.status_code == 202
    response = start(planner)
    assert response.status_code == 202, response.json()
    assert response.json()["created"] is False
    assert start(planner, tasks=[task("a")]).status_code == 409


def test_a_replay_is_byte_for_byte_the_first_response(planner, coder):
    body = planner.body("run.started", {"run": "r1", "tasks": [task("a")]})
    headers = planner.headers(body, webhook_id="msg_bytes")
    first = planner.post_raw(body, headers)
    again = planner.post_raw(body, planner.headers(body, webhook_id="msg_bytes"))
    assert first.status_code == again.status_code == 202
    assert first.content == again.content


def test_a_get_on_the_webhook_is_a_json_405(planner, client):
    response = client.get(planner.path)
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert response.json()["errors"][0]["loc"] == "method"


def test_an_unknown_api_path_is_a_json_404(client):
    response = client.get("/api/v1/nothing/here")
    assert response.status_code == 404
    assert response.json()["errors"][0]["loc"] == "path"
    assert client.get("/no-such-page/").status_code == 404
    assert b"Nothing here" in client.get("/no-such-page/").content


def test_an_unknown_acting_agent_is_named_with_the_other_bad_references(planner, coder):
    start(planner)
    attempt = {"prompt_hash": "p", "context_hash": "c"}
    response = planner.post(
        "task.started", {"run": "r1", "task": "zz", "agent": "ghost", "attempt": attempt}
    )
    assert response.status_code == 422
    assert {e["loc"] for e in response.json()["errors"]} == {"data.agent", "data.task"}
    response = planner.post(
        "task.finished", {"run": "r1", "task": "a", "agent": "ghost", "outcome": "maybe"}
    )
    assert response.status_code == 422
    assert {e["loc"] for e in response.json()["errors"]} == {"data.agent", "data.outcome"}


def test_no_task_starts_in_a_run_that_is_over(client, planner, coder):
    start(planner, tasks=[task("a"), task("side", prerequisites=["a"])])
    Run.objects.filter(key="r1").update(state="failed")  # say an abort failed it
    token = services.agent_create(fleet=planner.agent.fleet, name="reader")[2]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    frontier = client.get("/api/v1/runs/r1/frontier", **auth).json()
    assert frontier["ready"] == []
    assert frontier["deferred"] == [
        {"task": "a", "blockers": ["run:failed"]},
        {"task": "side", "blockers": ["run:failed", "prerequisite:a"]},
    ]
    tasks = {t["key"]: t for t in client.get("/api/v1/runs/r1", **auth).json()["tasks"]}
    assert tasks["a"]["blockers"] == ["run:failed"] and tasks["a"]["ready"] is False
    added = planner.post("tasks.added", {"run": "r1", "tasks": [task("late")]})
    assert added.status_code == 409
    assert not Task.objects.filter(key="late").exists()
    response = coder.post(
        "task.started",
        {"run": "r1", "task": "side", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
    )
    assert response.status_code == 409
    assert {"loc": "blockers", "msg": "run:failed"} in response.json()["errors"]
    assert Task.objects.get(key="side").state == "pending"


def test_evidence_whose_payload_is_not_what_its_hash_says_is_422(planner, coder):
    from runs.claims.hashing import payload_hash

    start(planner)
    real = {"columns": ["column_name"], "rows": [["id"], ["loyalty_points"]]}
    forged = {"columns": ["column_name"], "rows": [["id"], ["customer_tier"]]}
    evidence = {"kind": "query_result", "source": "SELECT 1", "payload_hash": payload_hash(real)}
    claim = {
        "key": "plan.tier",
        "statement": "tier exists",
        "evidence": {**evidence, "payload": forged},
    }
    response = planner.post(
        "claim.posted", {"run": "r1", "task": "a", "agent": "coder", "claim": claim}
    )
    assert response.status_code == 422
    [bad] = response.json()["errors"]
    assert bad["loc"] == "data.claim.evidence"
    assert payload_hash(forged) in bad["msg"]
    claim["evidence"]["payload"] = real
    response = planner.post(
        "claim.posted", {"run": "r1", "task": "a", "agent": "coder", "claim": claim}
    )
    assert response.status_code != 422, response.json()


def test_json_nested_too_deeply_is_refused_not_a_500(planner, coder):
    deep = "[" * 100_000 + "]" * 100_000
    body = (
        f'{{"type": "run.started", "timestamp": "2026-12-02T10:00:00Z", "data": {deep}}}'.encode()
    )
    response = planner.post_raw(body, planner.headers(body))
    assert response.status_code == 400
    assert "nested more than 64 levels deep" in response.json()["errors"][0]["msg"]
    start(planner)
    payload: dict = {}
    for _ in range(200):
        payload = {"x": payload}
    evidence = {
        "kind": "query_result",
        "source": "SELECT 1",
        "payload_hash": "sha256:" + "0" * 64,
        "payload": payload,
    }
    claim = {"key": "c", "statement": "s", "evidence": evidence}
    response = planner.post(
        "claim.posted", {"run": "r1", "task": "a", "agent": "coder", "claim": claim}
    )
    assert response.status_code == 422
    assert "nested more than 64 levels deep" in response.json()["errors"][0]["msg"]


def test_a_used_webhook_id_with_an_unreadable_body_is_still_a_conflict(planner, coder):
    body = planner.body("run.started", {"run": "r1", "tasks": [task("a")]})
    assert planner.post_raw(body, planner.headers(body, webhook_id="msg_used")).status_code == 202
    for bad in (b"not json", b'{"type": NaN}', b"\xff\xfe"):
        response = planner.post_raw(bad, planner.headers(bad, webhook_id="msg_used"))
        assert response.status_code == 409, bad
        assert response.json()["errors"][0]["loc"] == "webhook-id"


@pytest.mark.parametrize("key", [".", ".."])
def test_a_dot_key_is_refused_it_would_vanish_from_a_url(planner, coder, key):
    response = start(planner, run=key)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == "data.run"
    assert not response.json()["errors"][0]["msg"].startswith("Value error")


def test_a_live_events_time_is_when_the_server_received_it_not_the_agents_stamp(planner, coder):
    start(planner)
    before = timezone.now()
    response = coder.post(
        "task.started",
        {"run": "r1", "task": "a", "attempt": ATTEMPT},
        timestamp="2020-01-01T00:00:00Z",  # an agent's clock far in the past
    )
    assert response.status_code == 202, response.content
    started = Task.objects.get(key="a").started_at
    assert before <= started <= timezone.now()
    event = Event.objects.get(type="task.started")
    assert (event.occurred_at.year, event.received_at) == (2020, started)


def chunked(sender: Sender, body: bytes, *, terminated: bool) -> Any:
    """The body sent as a client streaming it would: Transfer-Encoding chunked, no Content-Length
    (the server, gunicorn, hands the app the unchunked bytes and says it ends the input)."""
    environ = {
        **wsgi_headers(sender.headers(body)),
        "CONTENT_TYPE": "application/json",
        "HTTP_TRANSFER_ENCODING": "chunked",
        "wsgi.input": io.BytesIO(body),
    }
    if terminated:
        environ["wsgi.input_terminated"] = True
    with TestCase.captureOnCommitCallbacks(execute=True):
        return sender.client.generic("POST", sender.path, b"", **environ)


def test_a_chunked_body_the_server_ends_is_read_and_applied(planner, coder):
    response = chunked(planner, run_started(), terminated=True)
    assert response.status_code == 202, response.content
    assert Run.objects.get().key == "r1"


def test_a_chunked_body_a_server_cannot_end_is_411_not_an_authentication_failure(planner, coder):
    response = chunked(planner, run_started(), terminated=False)
    assert response.status_code == 411
    assert response.json() == {
        "errors": [
            {
                "loc": "content-length",
                "msg": "a chunked body (Transfer-Encoding: chunked, no Content-Length) cannot be "
                "read by this server: send the body with a Content-Length",
            }
        ]
    }
    assert not Run.objects.exists() and not Event.objects.exists()


def test_a_value_the_database_will_not_store_is_422_and_writes_nothing(planner, coder, monkeypatch):
    """Whatever the checks before let through, a value the database refuses (DataError) is the
    sender's to fix: a 422 saying what the database said, not a 500."""
    from django.db import DataError

    from fleet import dispatch

    def refused(context, data):
        Run.objects.create(
            fleet_id=context.sender.fleet_id,
            key="half",
            started_by=context.sender,
            started_at=context.at,
        )
        raise DataError("numeric field overflow")

    monkeypatch.setitem(dispatch.HANDLERS, "capability.changed", refused)
    response = planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "r"}
    )
    assert response.status_code == 422
    assert response.json() == {
        "errors": [
            {
                "loc": "body",
                "msg": "holds a value the database cannot store: numeric field overflow",
            }
        ]
    }
    assert not Run.objects.exists() and not Event.objects.exists()


BLANK = "must not contain a space other than the plain one (U+{} at position {}): it looks like another key"
AT_AN_END = "must not start or end with a space: it looks like the key without it"


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("tier\u00a0key", BLANK.format("00A0", 4)),
        ("tier\u3000key", BLANK.format("3000", 4)),
        ("\u2800", BLANK.format("2800", 0)),
        ("plan ", AT_AN_END),
        (" ", AT_AN_END),
    ],
)
def test_a_key_that_looks_like_another_is_422_naming_it(planner, coder, key, says):
    """ "plan", "plan " and "plan" with a no-break space were three tasks that look like one."""
    declared = planner.post("run.started", {"run": "r1", "tasks": [task("plan"), task(key)]})
    assert errors_of(declared) == {"data.tasks.1.key": says}
    assert not Run.objects.exists()


def test_an_artifact_that_is_not_shown_as_itself_is_422_naming_it(planner, coder):
    a_running(planner)
    finished = coder.post(
        "task.finished",
        {"run": "r1", "task": "a", "outcome": "succeeded",
         "artifacts": [{"kind": "PR\u200b", "ref": "acme/shop#1\u202e"}]},
    )  # fmt: skip
    assert set(errors_of(finished)) == {"data.artifacts.0.kind", "data.artifacts.0.ref"}
    assert Task.objects.get(key="a").state == "running"


@pytest.mark.parametrize(
    ("char", "name"),
    [("\u202e", "202E"), ("\u2066", "2066"), ("\u200f", "200F"), ("\u2028", "2028"),
     ("\u2029", "2029"), ("\x85", "0085"), ("\n", "000A"), ("\u200b", "200B"),
     ("\ufeff", "FEFF"), ("\u00ad", "00AD"), ("\u2060", "2060"), ("\u3164", "3164"),
     ("\U000e0020", "E0020"), ("\U0001bca0", "1BCA0"), ("\U00013430", "13430")],
)  # fmt: skip
def test_a_key_with_a_character_not_shown_as_itself_is_422_naming_it(planner, coder, char, name):
    """A right-to-left override in a claim's key reversed the page's text after it; a line
    separator in a run's key broke every email's subject about it (the reviewer never reached);
    a zero-width space made a second key that looks like the first.
    Run, task and claim keys and capabilities refuse them, naming the field and the character."""
    bad = f"tier{char}key"
    declared = planner.post(
        "run.started",
        {"run": bad, "tasks": [task("a"), task(bad), task("b", capabilities=[bad])]},
    )
    errors = errors_of(declared)
    assert set(errors) == {"data.run", "data.tasks.1.key", "data.tasks.2.capabilities.0"}
    assert errors["data.run"] == (
        f"must not contain control or invisible characters (U+{name} at position 4): keys and "
        "names are shown as they are, on pages, in emails and in CSV files"
    )
    assert not Run.objects.exists()
    a_running(planner)
    claimed = coder.post(
        "claim.posted", {"run": "r1", "task": "a", "claim": {"key": bad, "statement": "s"}}
    )
    assert list(errors_of(claimed)) == ["data.claim.key"]
    fine = coder.post(
        "claim.posted",
        {"run": "r1", "task": "a", "claim": {"key": "tarif-ü-\u05d0\u05d1", "statement": "s"}},
    )
    assert fine.status_code == 202, fine.content  # letters of any script are keys' own
    # The joiners a script or an emoji needs are shown as part of what they join.
    for key in ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\U0001f469\u200d\U0001f4bb"):
        joined = coder.post(
            "claim.posted", {"run": "r1", "task": "a", "claim": {"key": key, "statement": "s"}}
        )
        assert joined.status_code == 202, joined.content
