"""The packet Bulkhead drafts from the attempts: pure, and always a packet once asked its question."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from escalations.packet_draft import (
    AttemptFacts,
    RefutedClaim,
    build_failure_packet,
    missing_fields,
)
from escalations.packets import PACKET_MAX_BYTES, Packet, packet_size, validate_packet
from runs.claims.hashing import payload_hash

COLUMNS = {"columns": ["column_name"], "rows": [["id"], ["name"], ["loyalty_points"]]}
REALITY = {
    "kind": "query_result",
    "source": "SELECT name AS column_name FROM pragma_table_info('customers')",
    "payload_hash": payload_hash(COLUMNS),
    "payload": COLUMNS,
    "datasource": "orders",
    "workspace": None,
}
QUESTION = "Where does a customer's tier come from today?"


def attempts() -> list[AttemptFacts]:
    return [
        AttemptFacts(
            number=1,
            agent="planner",
            prompt_hash="prompt:v1",
            context_hash="context:v1",
            outcome="failed",
            failure_kind="reasoning",
            failure_signature="claim-refuted",
            failure_message="claim plan.tier was refuted",
            decisions=(("reframe", "Reframe: attempt 1 failed with a reasoning failure"),),
        ),
        AttemptFacts(
            number=2,
            agent="planner",
            prompt_hash="prompt:v2",
            context_hash="context:v1",
            outcome="failed",
            failure_kind="reasoning",
            failure_signature="claim-refuted",
            decisions=(("escalate", "Signal rule: attempts 1 and 2 were prompted differently"),),
        ),
    ]


def with_question(content: dict[str, Any]) -> dict[str, Any]:
    return {**content, "smallest_unblocking_question": QUESTION}


def test_tried_is_each_attempt_with_what_changed_and_the_decision_after_it() -> None:
    draft = build_failure_packet(attempts(), task="plan")

    first, second = draft.content["tried"]
    assert first == (
        "Attempt 1 by planner (prompt prompt:v1, context context:v1) failed (reasoning, "
        "claim-refuted): claim plan.tier was refuted. Decision: reframe — Reframe: attempt 1 "
        "failed with a reasoning failure"
    )
    assert second.startswith(
        "Attempt 2 by planner (prompt prompt:v2, context context:v1; prompt changed since "
        "attempt 1) failed (reasoning, claim-refuted). Decision: escalate — Signal rule"
    )


def test_an_attempt_on_the_same_prompt_and_context_says_so() -> None:
    same = [attempts()[0], AttemptFacts(2, "planner", "prompt:v1", "context:v1", "failed")]

    assert "; the same as attempt 1)" in build_failure_packet(same, task="t").content["tried"][1]


def test_ruled_out_is_each_refuted_claim_and_how() -> None:
    refuted = RefutedClaim(
        key="plan.tier",
        statement="Use the `customer_tier` column on `customers`",
        how="refuted by the verifier: re-ran the query on data source 'orders'",
    )
    draft = build_failure_packet(attempts(), task="plan", refuted=[refuted])

    assert draft.content["ruled_out"] == [
        {
            "hypothesis": "Use the `customer_tier` column on `customers`",
            "how": "claim plan.tier: refuted by the verifier: re-ran the query on data source "
            "'orders'",
        }
    ]


def test_evidence_is_the_checked_evidence_each_once_and_never_an_agents_text() -> None:
    agent_text = {**REALITY, "source": "agent:schema"}
    answer = {**REALITY, "kind": "human_answer", "source": "reviewer:alice"}
    no_hash = {**REALITY, "payload_hash": ""}  # a refutation with nothing read
    forged = {**REALITY, "source": "SELECT 1", "payload": {"columns": [], "rows": []}}

    draft = build_failure_packet(
        attempts(), task="plan", evidence=[REALITY, REALITY, agent_text, answer, no_hash, forged]
    )

    assert draft.content["evidence"] == [
        {k: v for k, v in REALITY.items() if v is not None},
        # A payload that is not the one its hash vouches for is left out; the hash stays.
        {
            "kind": "query_result",
            "source": "SELECT 1",
            "payload_hash": REALITY["payload_hash"],
            "datasource": "orders",
        },
    ]


def test_the_question_is_left_to_the_agent_and_so_is_evidence_when_none_was_checked() -> None:
    checked = build_failure_packet(attempts(), task="plan", evidence=[REALITY])
    unchecked = build_failure_packet(attempts(), task="plan")

    assert checked.content["smallest_unblocking_question"] == ""
    assert checked.missing == ("smallest_unblocking_question",)
    assert unchecked.missing == ("smallest_unblocking_question", "evidence")
    assert missing_fields(with_question(checked.content)) == ()


def test_the_draft_with_a_question_is_a_packet() -> None:
    draft = build_failure_packet(attempts(), task="plan", evidence=[REALITY])

    assert isinstance(validate_packet(with_question(draft.content)), Packet)
    # Without its question it is not: the agent must ask it.
    assert isinstance(validate_packet(draft.content), list)


text = st.text(st.characters(codec="utf-8"), max_size=3000)
facts = st.builds(
    AttemptFacts,
    number=st.integers(1, 500),
    agent=st.text(min_size=1, max_size=100),
    prompt_hash=st.text(max_size=200),
    context_hash=st.text(max_size=200),
    outcome=st.sampled_from(["", "failed", "succeeded"]),
    failure_kind=st.text(max_size=20),
    failure_signature=st.text(max_size=500),
    failure_message=text,
    decisions=st.lists(st.tuples(st.sampled_from(["reframe", "escalate"]), text), max_size=3).map(
        tuple
    ),
)
claims = st.builds(RefutedClaim, key=st.text(max_size=200), statement=text, how=text)
payloads = st.fixed_dictionaries(
    {"columns": st.just(["c"]), "rows": st.lists(st.lists(text, max_size=1), max_size=40)}
)


@st.composite
def evidence(draw: Any) -> dict[str, Any]:
    payload = draw(payloads)
    return {
        "kind": draw(st.sampled_from(["query_result", "file_read", "test_run", "human_answer"])),
        "source": draw(st.text(min_size=1, max_size=500)),
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "datasource": draw(st.none() | st.text(max_size=100)),
    }


@settings(max_examples=60, deadline=None)
@given(
    st.lists(facts, min_size=1, max_size=30),
    st.lists(claims, max_size=25),
    st.lists(evidence(), max_size=25),
)
def test_any_record_drafts_a_packet_that_takes_a_question_and_fits(
    found: list[AttemptFacts], refuted: list[RefutedClaim], checked: list[dict[str, Any]]
) -> None:
    draft = build_failure_packet(found, task="plan", refuted=refuted, evidence=checked)
    content = with_question(draft.content)
    if "evidence" in draft.missing:
        content["evidence"] = [REALITY | {"workspace": "w"}]

    assert isinstance(validate_packet(content), Packet), validate_packet(content)
    assert packet_size(content) <= PACKET_MAX_BYTES
