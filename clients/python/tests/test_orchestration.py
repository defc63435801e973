"""The task block, claims, escalations and the answer, against the loopback stand-in."""

import json

import pytest

from bulkhead_client import Bulkhead, NoAnswer, Packet, PacketReturned, RuledOut, TaskFailed
from bulkhead_client.evidence import file_lines

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def sent(fake):
    return [json.loads(s.body) for s in fake.seen if s.method == "POST"]


@pytest.fixture
def run(fake, sleeps):
    return Bulkhead(endpoint=fake.endpoint, secret=SECRET, token="bhk_t", sleep=sleeps).run("r1")


def test_a_block_that_ends_normally_finishes_the_task_with_its_artifacts(fake, run):
    fake.script = [(202, {}, {"event": "e1", "type": "task.started", "attempt": 2})]
    with run.task("code", prompt_hash="p2", context_hash="c2", agent="coder") as attempt:
        assert attempt.number == 2
        attempt.artifact("pr", "acme/shop#12")
    started, finished = sent(fake)
    assert started["data"] == {
        "run": "r1", "task": "code", "agent": "coder", "consumes": [], "refreshed": [],
        "attempt": {"prompt_hash": "p2", "context_hash": "c2"},
    }  # fmt: skip
    assert finished["type"] == "task.finished"
    assert finished["data"] == {
        "run": "r1", "task": "code", "agent": "coder", "outcome": "succeeded",
        "background_killed": [], "resumable": False, "artifacts": [{"kind": "pr", "ref": "acme/shop#12"}],
    }  # fmt: skip


def test_a_task_failed_in_the_block_is_reported_and_not_raised(fake, run):
    with run.task("plan", prompt_hash="p", context_hash="c"):
        raise TaskFailed("reasoning", "no-tier-source", "nothing holds a tier")
    finished = sent(fake)[-1]["data"]
    assert finished["outcome"] == "failed"
    assert finished["failure"] == {
        "kind": "reasoning", "signature": "no-tier-source", "message": "nothing holds a tier"
    }  # fmt: skip


def test_any_other_exception_is_reported_as_an_error_and_raised(fake, run):
    with pytest.raises(KeyError), run.task("plan", prompt_hash="p", context_hash="c"):
        raise KeyError("tier")
    failure = sent(fake)[-1]["data"]["failure"]
    assert (failure["kind"], failure["signature"]) == ("error", "KeyError")


def test_an_attempt_that_escalates_sends_no_finish(fake, run):
    fake.script = [
        (202, {}, {"event": "e1", "type": "task.started", "attempt": 1}),
        (202, {}, {"event": "e2", "type": "packet.submitted", "escalation": 7, "packet": "opened"}),
    ]
    with run.task("plan", prompt_hash="p", context_hash="c") as attempt:
        accepted = attempt.escalate(Packet(smallest_unblocking_question="Which tier source?"))
    assert accepted.get("escalation") == 7
    assert [e["type"] for e in sent(fake)] == ["task.started", "packet.submitted"]
    assert sent(fake)[-1]["data"]["packet"] == {
        "smallest_unblocking_question": "Which tier source?"
    }


def test_claims_carry_evidence_hashed_the_canonical_way(fake, run, tmp_path):
    (tmp_path / "pricing.yaml").write_text("discounts:\n  gold: 1000\n")
    evidence = file_lines("pricing.yaml", 2, root=tmp_path, workspace="shop")
    run.claim("plan", "plan.gold", "gold is `1000`", evidence=evidence, about=["pricing.yaml"])
    claim = sent(fake)[-1]["data"]["claim"]
    assert claim["evidence"]["source"] == "pricing.yaml:2-2"
    assert claim["evidence"]["payload"] == {
        "path": "pricing.yaml",
        "lines": [2, 2],
        "text": "  gold: 1000",
    }
    assert claim["about"] == ["pricing.yaml"] and claim["load_bearing"] is True


def test_a_whole_packet_is_sent_as_the_packet_contract_says(fake, run):
    packet = Packet(
        task="plan",
        tried=["via customers.customer_tier"],
        ruled_out=[RuledOut(hypothesis="another name", how="searched customers")],
        evidence=[],
        smallest_unblocking_question="Where does a tier come from?",
    )
    run.escalate("plan", packet)
    assert sent(fake)[-1]["data"]["packet"] == {
        "task": "plan", "tried": ["via customers.customer_tier"],
        "ruled_out": [{"hypothesis": "another name", "how": "searched customers"}],
        "evidence": [], "smallest_unblocking_question": "Where does a tier come from?",
    }  # fmt: skip


def escalation(status, answer=None, missing=(), note=None):
    return {
        "id": 7, "run": "r1", "task": "plan", "status": status, "outcome": status, "tasks": [],
        "reason": "", "opened_at": "2026-06-02T09:00:00Z", "assigned_to": None, "tier": 1, "due_at": None,
        "overdue": False,
        "question": "q?", "packet": None, "drafted": False, "from_draft": [], "checks_pending": False,
        "checks": [], "claimed_by": None, "answer": answer, "missing": list(missing), "note": note,
    }  # fmt: skip


def test_wait_for_answer_polls_the_escalation_until_a_reviewer_answers(fake, run):
    answer = {"text": "Use loyalty_points", "by": "alice", "at": "2026-06-02T09:10:00Z"}
    fake.script = [(200, {}, escalation("open")), (200, {}, escalation("answered", answer))]
    found = run.wait_for_answer(7, interval=0.01, timeout=30)
    assert found.text == "Use loyalty_points" and found.by == "alice"
    assert [s.path for s in fake.seen] == ["/api/v1/escalations/7"] * 2


def test_wait_for_answer_says_what_a_returned_packet_is_missing(fake, run):
    fake.script = [
        (200, {}, escalation("returned", missing=["tried"], note="tried: name the sources"))
    ]
    with pytest.raises(PacketReturned) as raised:
        run.wait_for_answer(7, interval=0.01)
    assert raised.value.missing == ["tried"] and raised.value.note == "tried: name the sources"


def test_wait_for_answer_gives_up_on_a_closed_escalation(fake, run):
    fake.script = [(200, {}, escalation("closed"))]
    with pytest.raises(NoAnswer, match="closed"):
        run.wait_for_answer(7, interval=0.01)
