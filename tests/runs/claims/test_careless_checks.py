"""Careless agents against the gate, with a real worker: evidence that is real but about something
else, a producer checking itself, a read of the run's own plan, another agent's text, a claim about
nothing. Each leaves the claim unverified (and the coders waiting) with the reason a reviewer reads.
"""

from pathlib import Path
from typing import Any

import pytest

from fleet import services
from runs.claims.bearing import NO_SUBJECT
from runs.claims.hashing import file_read_payload, payload_hash, query_result_payload
from runs.claims.hashing import test_run_payload as run_payload
from runs.models import Claim, Decision, Evidence, Task
from tests.conftest import Sender, eventually
from tests.fixtures.orders import REAL_COLUMNS, OrdersDatabase
from tests.fixtures.orders import orders_database as orders_database  # noqa: F401
from tests.fixtures.orders import orders_postgresql as orders_postgresql  # noqa: F401
from tests.fixtures.orders import orders_postgresql_session as orders_postgresql_session  # noqa: F401
from tests.fixtures.seed import ATTEMPT, INVENTED, PhoenixDX

pytestmark = [
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("worker"),
]

RUN = "tier-discounts"
CLAIM = "plan.customer-tier"
PLAN = "Use the existing `customer_tier` column on `customers` to select the discount rule."
TASKS = [
    {"key": "plan", "agent": "planner"},
    {"key": "review-plan", "agent": "planner", "prerequisites": ["plan"], "checks": [CLAIM]},
    {"key": "confirm-schema", "agent": "schema", "prerequisites": ["plan"], "checks": [CLAIM]},
    {"key": "discount-resolver", "agent": "coder-a", "prerequisites": ["plan"], "consumes": [CLAIM]},
]  # fmt: skip


@pytest.fixture
def orders(seed: PhoenixDX, orders_database: OrdersDatabase) -> OrdersDatabase:
    services.source_add(
        fleet=seed.fleet, kind="datasource", name="orders", value=orders_database.dsn
    )
    return orders_database


def select_1() -> dict[str, Any]:
    """The careless check: a query that runs on the orders database and is about nothing."""
    payload = query_result_payload(columns=["one"], rows=[[1]])
    return {
        "kind": "query_result",
        "source": "SELECT 1 AS one",
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "datasource": "orders",
    }


def count_orders() -> dict[str, Any]:
    payload = query_result_payload(columns=["n"], rows=[[2]])
    return {
        "kind": "query_result",
        "source": "SELECT count(*) AS n FROM orders",
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "datasource": "orders",
    }


def ready(key: str) -> bool:
    return Task.objects.get(key=key).ready


def start(sender: Sender, key: str) -> Any:
    eventually(lambda: ready(key), what=f"{key} to be ready")
    response = sender.post("task.started", {"run": RUN, "task": key, "attempt": ATTEMPT})
    assert response.status_code == 202, response.json()
    return response


def plan_posts(seed: PhoenixDX, claim: dict[str, Any], *, finish: bool = True) -> Any:
    """The planner declares the run, starts the plan, posts `claim` and (by default) finishes."""
    assert seed.planner.post("run.started", {"run": RUN, "tasks": TASKS}).status_code == 202
    start(seed.planner, "plan")
    posted = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    assert posted.status_code == 202, posted.json()
    if finish:
        done = {"run": RUN, "task": "plan", "outcome": "succeeded"}
        assert seed.planner.post("task.finished", done).status_code == 202
    return posted


def checks(sender: Sender, task: str, verdict: str, evidence: dict[str, Any]) -> None:
    data = {"run": RUN, "task": task, "claim": CLAIM, "verdict": verdict, "evidence": evidence}
    response = sender.post("claim.checked", data)
    assert response.status_code == 202, response.json()


def settled() -> Claim:
    """The claim once the worker has judged everything it was given."""
    eventually(lambda: not Claim.objects.get(key=CLAIM).verification_pending, what="the verifier")
    return Claim.objects.get(key=CLAIM)


def the_coder_waits(seed: PhoenixDX) -> None:
    blocked = seed.coder_a.post(
        "task.started", {"run": RUN, "task": "discount-resolver", "attempt": ATTEMPT}
    )
    assert blocked.status_code == 409, blocked.json()
    assert f"claim:{CLAIM}" in str(blocked.json())


# Evidence about something else ----------------------------------------------------------------


def test_select_1_does_not_verify_a_statement_about_customer_tier(seed, orders):
    plan_posts(seed, {"key": CLAIM, "statement": INVENTED, "evidence": select_1()})

    claim = settled()
    assert claim.status == "unverified"
    assert claim.status_reason == (
        "reality matches its evidence, but the evidence does not mention customers, "
        "customer_tier: it bears on another question"
    )
    posted = Evidence.objects.get(claim=claim, role="posted")
    assert posted.verdict == "unverified"
    the_coder_waits(seed)


def test_a_consumers_select_1_is_not_accepted_and_says_which_subject_it_missed(seed, orders):
    plan_posts(seed, {"key": CLAIM, "statement": INVENTED})
    start(seed.schema, "confirm-schema")

    checks(seed.schema, "confirm-schema", "verified", select_1())

    claim = settled()
    assert claim.status == "unverified"
    assert claim.status_reason == (
        "still unverified: agent:schema's verified verdict was not accepted: the evidence does "
        "not mention customers, customer_tier: it bears on another question"
    )
    the_coder_waits(seed)


def test_the_real_columns_of_customers_do_not_verify_the_invented_column(seed, orders):
    plan_posts(seed, {"key": CLAIM, "statement": INVENTED})
    start(seed.schema, "confirm-schema")

    checks(seed.schema, "confirm-schema", "verified", orders.columns_evidence(REAL_COLUMNS))

    claim = settled()
    assert claim.status == "unverified"
    assert claim.status_reason.endswith(
        "the evidence does not mention customer_tier: it bears on another question"
    )
    the_coder_waits(seed)


def test_a_claim_with_about_whose_evidence_mentions_all_subjects_verifies(seed, orders):
    claim = {
        "key": CLAIM,
        "statement": "The discount rule reads each customer's points.",
        "about": ["customers.loyalty_points"],
        "evidence": orders.columns_evidence(REAL_COLUMNS),
    }
    plan_posts(seed, claim)

    verified = settled()
    assert (verified.status, verified.checked_by) == ("verified", "verifier")
    assert verified.about == ["customers.loyalty_points"]
    eventually(lambda: ready("discount-resolver"))


def test_a_claim_with_about_is_not_verified_by_evidence_missing_one_subject(seed, orders):
    claim = {
        "key": CLAIM,
        "statement": "The discount rule reads each customer's tier.",
        "about": ["customers.customer_tier", "pricing-config.yaml"],
        "evidence": orders.columns_evidence(REAL_COLUMNS),
    }
    plan_posts(seed, claim)

    assert settled().status_reason == (
        "reality matches its evidence, but the evidence does not mention "
        "customers.customer_tier, pricing-config.yaml: it bears on another question"
    )


def test_a_weaker_about_than_the_statement_does_not_verify_the_invented_column(seed, orders):
    """The cheapest way through `about`: name only the table, so that the table's real columns
    would do. The statement's own `customers.customer_tier` still has to be mentioned."""
    claim = {
        "key": CLAIM,
        "statement": "`customers.customer_tier` exists",
        "about": ["customers"],
        "evidence": orders.columns_evidence(REAL_COLUMNS),
    }
    plan_posts(seed, claim)

    claim = settled()
    assert claim.status != "verified"
    assert "customer_tier" in claim.status_reason, claim.status_reason
    the_coder_waits(seed)


def test_a_refutation_by_evidence_mentioning_no_subject_does_not_refute(seed, orders):
    plan_posts(seed, {"key": CLAIM, "statement": INVENTED})
    start(seed.schema, "confirm-schema")

    checks(seed.schema, "confirm-schema", "refuted", count_orders())

    claim = settled()
    assert claim.status == "unverified"
    assert claim.status_reason == (
        "still unverified: agent:schema's refuted verdict was not accepted: the evidence mentions "
        "none of the claim's subjects (customers, customer_tier): it bears on another question"
    )
    assert not Decision.objects.filter(task__key="plan").exists()  # nobody is reframed on it


def test_the_seeds_information_schema_query_still_refutes_the_invented_column(seed, orders):
    plan_posts(seed, {"key": CLAIM, "statement": PLAN})
    start(seed.schema, "confirm-schema")

    checks(seed.schema, "confirm-schema", "refuted", orders.columns_evidence(REAL_COLUMNS))

    claim = settled()
    assert (claim.status, claim.checked_by) == ("refuted", "agent:schema")
    eventually(lambda: Decision.objects.filter(task__key="plan", action="reframe").exists())


def test_a_load_bearing_claim_with_no_subject_stays_unverified(seed, orders):
    statement = "customers has a customer_tier column; use it to select the discount rule"
    claim = {
        "key": CLAIM,
        "statement": statement,
        "evidence": orders.columns_evidence(REAL_COLUMNS),
    }
    posted = plan_posts(seed, claim)

    assert posted.json()["reason"] == NO_SUBJECT
    row = Claim.objects.get(key=CLAIM)
    assert (row.status, row.status_reason, row.verification_pending) == (
        "unverified",
        NO_SUBJECT,
        False,
    )
    # Nor can a consumer settle it, either way.
    start(seed.schema, "confirm-schema")
    checks(seed.schema, "confirm-schema", "refuted", orders.columns_evidence(REAL_COLUMNS))
    claim_row = settled()
    assert claim_row.status == "unverified"
    assert claim_row.status_reason.endswith(f"was not accepted: {NO_SUBJECT}")
    the_coder_waits(seed)


def test_tests_that_fail_do_not_verify_tests_pass(seed, orders, tmp_path: Path):
    command = 'sh -c "exit 1" test_discounts'
    services.source_add(fleet=seed.fleet, kind="workspace", name="repo", value=str(tmp_path))
    services.source_add(fleet=seed.fleet, kind="command", name="tests", value=command)
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    payload = run_payload(command=command, exit_code=1, output_sha256=empty)
    evidence = {
        "kind": "test_run",
        "source": command,
        "payload_hash": payload_hash(payload),
        "payload": payload,
    }
    plan_posts(seed, {"key": CLAIM, "statement": "`test_discounts` passes", "evidence": evidence})

    claim = settled()
    assert claim.status == "unverified"
    assert claim.status_reason == (
        "reality matches its evidence, but the command exits with 1, not 0: the tests do not pass"
    )


# Circular checks ------------------------------------------------------------------------------


def test_the_producing_task_checking_its_own_claim_does_not_verify(seed, orders):
    real = "`customers` has a `loyalty_points` column"
    plan_posts(seed, {"key": CLAIM, "statement": real}, finish=False)

    checks(seed.planner, "plan", "verified", orders.columns_evidence(REAL_COLUMNS))

    claim = settled()
    assert claim.status == "unverified"
    assert claim.status_reason == (
        "still unverified: agent:planner's verified verdict was not accepted: task plan produced "
        "this claim: a check by its producer is circular and never verifies it"
    )


def test_the_producing_agent_checking_from_another_task_does_not_verify(seed, orders):
    real = "`customers` has a `loyalty_points` column"
    plan_posts(seed, {"key": CLAIM, "statement": real})
    start(seed.planner, "review-plan")

    checks(seed.planner, "review-plan", "verified", orders.columns_evidence(REAL_COLUMNS))

    claim = settled()
    assert claim.status == "unverified"
    assert claim.status_reason.endswith(
        "not accepted: agent:planner produced this claim: a check by its producer is circular "
        "and never verifies it"
    )
    # The same evidence from another agent verifies it: the evidence was never the problem.
    start(seed.schema, "confirm-schema")
    checks(seed.schema, "confirm-schema", "verified", orders.columns_evidence(REAL_COLUMNS))
    eventually(lambda: Claim.objects.get(key=CLAIM).status == "verified")


def test_an_orchestrator_checking_a_claim_it_sent_for_another_agent_does_not_verify(seed, orders):
    """The orchestrator posted the claim for coder-a (data.agent), then checked it, from a task
    of its own and acting for the schema agent: the claim recorded coder-a only, so its own
    check verified what it had said itself."""
    real = "`customers` has a `loyalty_points` column"
    tasks = [{**TASKS[0], "agent": "coder-a"}, *TASKS[1:]]
    assert seed.planner.post("run.started", {"run": RUN, "tasks": tasks}).status_code == 202
    eventually(lambda: ready("plan"), what="plan to be ready")
    acting = {"run": RUN, "task": "plan", "agent": "coder-a"}
    assert seed.planner.post("task.started", {**acting, "attempt": ATTEMPT}).status_code == 202
    claim = {"key": CLAIM, "statement": real}
    assert seed.planner.post("claim.posted", {**acting, "claim": claim}).status_code == 202
    assert seed.planner.post("task.finished", {**acting, "outcome": "succeeded"}).status_code == 202
    assert Claim.objects.get(key=CLAIM).sent_by == "agent:planner"
    start(seed.planner, "review-plan")

    checks(seed.planner, "review-plan", "verified", orders.columns_evidence(REAL_COLUMNS))

    reason = "agent:planner produced this claim: a check by its producer is circular"
    assert settled().status == "unverified" and reason in settled().status_reason
    eventually(lambda: ready("confirm-schema"), what="confirm-schema to be ready")
    for_schema = {"run": RUN, "task": "confirm-schema", "agent": "schema"}
    assert seed.planner.post("task.started", {**for_schema, "attempt": ATTEMPT}).status_code == 202
    evidence = orders.columns_evidence(REAL_COLUMNS)
    checked = {**for_schema, "claim": CLAIM, "verdict": "verified", "evidence": evidence}
    assert seed.planner.post("claim.checked", checked).status_code == 202
    assert settled().status == "unverified"
    [for_schema_row] = Evidence.objects.filter(role="check", sent_by="agent:planner")
    assert for_schema_row.submitted_by == "agent:schema"
    # The schema agent's own check verifies it: the evidence was never the problem.
    checks(seed.schema, "confirm-schema", "verified", orders.columns_evidence(REAL_COLUMNS))
    eventually(lambda: Claim.objects.get(key=CLAIM).status == "verified")


def test_a_producer_may_refute_its_own_claim(seed, orders):
    plan_posts(seed, {"key": CLAIM, "statement": INVENTED}, finish=False)

    checks(seed.planner, "plan", "refuted", orders.columns_evidence(REAL_COLUMNS))

    assert settled().status == "refuted"


def plan_on_the_board(seed: PhoenixDX, tmp_path: Path) -> Path:
    """The planner posts its plan, finishes reporting plan.md (in the workspace `board`) as its
    artifact, and the schema agent starts: the board's folder."""
    board = tmp_path / "board"
    board.mkdir()
    (board / "plan.md").write_text(f"# Plan\n\n{PLAN}\n")
    services.source_add(fleet=seed.fleet, kind="workspace", name="board", value=str(board))
    plan_posts(seed, {"key": CLAIM, "statement": PLAN}, finish=False)
    done = {
        "run": RUN,
        "task": "plan",
        "outcome": "succeeded",
        "artifacts": [{"kind": "document", "ref": "plan.md"}],
    }
    assert seed.planner.post("task.finished", done).status_code == 202
    start(seed.schema, "confirm-schema")
    return board


def schema_reads_the_plan_at(seed: PhoenixDX, path: str) -> None:
    """The schema agent verifies the claim with the plan's line 3, read at `path`."""
    text = file_read_payload(path=path, start=3, end=3, lines=[PLAN])
    evidence = {
        "kind": "file_read",
        "source": f"{path}:3-3",
        "payload_hash": payload_hash(text),
        "payload": text,
    }
    checks(seed.schema, "confirm-schema", "verified", evidence)


def test_a_file_read_of_the_plan_artifact_does_not_verify(seed, orders, tmp_path: Path):
    """The seed's circular "confirmed", through the file system: the schema agent reads the plan."""
    plan_on_the_board(seed, tmp_path)

    schema_reads_the_plan_at(seed, "./plan.md")

    claim = settled()
    assert claim.status == "unverified"
    assert claim.status_reason == (
        "still unverified: agent:schema's verified verdict was not accepted: ./plan.md is the "
        "artifact task plan reported (document plan.md): the run's own output is not evidence, "
        "and reading it never verifies a claim"
    )
    the_coder_waits(seed)


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_file_read_of_the_plan_artifact_through_a_link_does_not_verify(
    seed, orders, tmp_path: Path, link: str
):
    """The careless agent's way around the rule above: a link to the artifact, by another name."""
    board = plan_on_the_board(seed, tmp_path)
    if link == "symlink":
        (board / "notes.md").symlink_to("plan.md")
    else:
        (board / "notes.md").hardlink_to(board / "plan.md")

    schema_reads_the_plan_at(seed, "notes.md")

    claim = settled()
    assert claim.status == "unverified"
    assert "notes.md is the artifact task plan reported (document plan.md)" in claim.status_reason
    the_coder_waits(seed)


def test_another_agents_text_never_verifies(seed, orders):
    plan = {"path": "plan.md", "lines": [3, 3], "text": PLAN}
    cited = {"kind": "file_read", "source": "agent:planner", "payload_hash": payload_hash(plan)}
    posted = plan_posts(seed, {"key": CLAIM, "statement": PLAN, "evidence": cited})
    assert posted.json()["reason"] == "another agent's text is not evidence"

    start(seed.schema, "confirm-schema")
    data = {"run": RUN, "task": "confirm-schema", "claim": CLAIM, "verdict": "verified"}
    refused = seed.schema.post("claim.checked", data | {"evidence": cited})
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["loc"] == "data.evidence.source"
    assert settled().status_reason == "another agent's text is not evidence"
    the_coder_waits(seed)
