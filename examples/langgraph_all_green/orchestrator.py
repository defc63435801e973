"""The seed's all-green story, orchestrated with LangGraph through the Bulkhead client.

Plain Python nodes, no language model: the planner invents a `customer_tier` column, the schema
agent checks it against the order database and refutes it, no coder starts on it, the planner is
reframed with the real columns, its second (differently prompted) plan fails the same way and
escalates, the orchestrator hands over the packet, waits for a reviewer's answer, finishes the
run and prints the blast radius Bulkhead computed.

    eval "$(.venv/bin/python examples/langgraph_all_green/provision.py)"   # from the repository
    .venv/bin/python examples/langgraph_all_green/orchestrator.py

The credentials are the fleet orchestrator's (it acts for each agent with `agent=`); ORDERS_DB
is the SQLite file registered as the fleet's `orders` data source (`provision.py` does both).
"""

import os
import sqlite3
import sys
import time
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from bulkhead_client import Blocked, Bulkhead, Packet, RuledOut, Task, text_hash
from bulkhead_client.canonical import payload_hash, query_result_payload
from bulkhead_client.events import Evidence
from bulkhead_client.evidence import query

CLAIM = "plan.tier-source"
COLUMNS = "SELECT name AS column_name FROM pragma_table_info('customers') ORDER BY cid"
TIERS = "SELECT name AS column_name FROM pragma_table_info('loyalty_tiers') ORDER BY cid"
TASKS = [
    Task(key="plan", title="Plan tier-based discounts", agent="planner"),
    Task(key="confirm-schema", title="Confirm the schema assumptions", agent="schema",
         prerequisites=["plan"], checks=[CLAIM]),
    Task(key="discount-resolver", title="Build the discount resolver", agent="coder-a",
         prerequisites=["confirm-schema"], consumes=[CLAIM]),
    Task(key="api-change", title="Change the order API", agent="coder-b",
         prerequisites=["confirm-schema"], consumes=[CLAIM]),
    Task(key="api-tests", title="Test the API change", agent="coder-b",
         prerequisites=["api-change"], consumes=[CLAIM]),
]  # fmt: skip


class Story(TypedDict, total=False):
    run: str
    escalation: int
    answer: str
    log: list[str]


def say(state: Story, line: str) -> list[str]:
    print(line, flush=True)
    return [*state.get("log", []), line]


class Orchestrator:
    def __init__(self, bh: Bulkhead, orders: sqlite3.Connection, run: str) -> None:
        self.bh = bh
        self.orders = orders
        self.run = bh.run(run)

    # Nodes ---------------------------------------------------------------------------------

    def declare(self, state: Story) -> Story:
        self.bh.declare_run(self.run.key, TASKS, title="Add tier-based discounts (LangGraph)")
        return {
            "run": self.run.key,
            "log": say(state, f"declared {self.run.key}: {len(TASKS)} tasks"),
        }

    def plan(self, state: Story) -> Story:
        with self.run.task("plan", agent="planner", prompt_hash=text_hash("plan v1"),
                           context_hash=text_hash("the ticket")) as attempt:  # fmt: skip
            posted = attempt.claim(
                CLAIM,
                "Use the existing `customer_tier` column on `customers` to select the discount rule",
            )
        return {
            "log": say(state, f"planner: claimed {CLAIM} ({posted.get('status')}, no evidence)")
        }

    def confirm_schema(self, state: Story) -> Story:
        with self.run.task("confirm-schema", agent="schema", prompt_hash=text_hash("schema"),
                           context_hash=text_hash("the plan")) as attempt:  # fmt: skip
            evidence = query(self.orders, COLUMNS, datasource="orders")
            columns = [row[0] for row in evidence.payload["rows"]] if evidence.payload else []
            verdict = "verified" if "customer_tier" in columns else "refuted"
            attempt.check(CLAIM, verdict, evidence)
        return {"log": say(state, f"schema: {CLAIM} {verdict} by the customers columns {columns}")}

    def coder_tries(self, state: Story) -> Story:
        try:
            self.run.start("discount-resolver", agent="coder-a", prompt_hash=text_hash("resolver"),
                           context_hash=text_hash("plan v1"))  # fmt: skip
        except Blocked as blocked:
            return {"log": say(state, f"coder-a may not start: {', '.join(blocked.blockers)}")}
        raise SystemExit("a coder started on an unchecked plan")

    def wait_for_reframe(self, state: Story) -> Story:
        context = wait(lambda: (c := self.run.context("plan")).decision == "reframe" and c)
        return {"log": say(state, f"planner reframed: {context.reason}")}

    def replan(self, state: Story) -> Story:
        """The reframed planner, prompted differently, invents a tier table: it fails the same way."""
        invented = query_result_payload(columns=["column_name"], rows=[["customer_id"], ["tier"]])
        evidence = Evidence(kind="query_result", source=TIERS, datasource="orders",
                            payload=invented, payload_hash=payload_hash(invented))  # fmt: skip
        with self.run.task("plan", agent="planner", prompt_hash=text_hash("plan v2"),
                           context_hash=text_hash("the ticket + the real columns")) as attempt:  # fmt: skip
            attempt.claim("plan.tier-table", "Customer tiers are kept in the `loyalty_tiers` table",
                          evidence=evidence)  # fmt: skip
            waiting = self.run.wait_for_escalation("plan", timeout=120)
            line = say(
                state, f"escalated (escalation {waiting.id}); Bulkhead asks for {waiting.missing}"
            )
            real = query(self.orders, COLUMNS, datasource="orders")
            accepted = attempt.escalate(
                Packet(
                    task="plan",
                    tried=["Resolve the discount rule via customers.customer_tier (from plan)",
                           "Reframed with the live schema: looked for a tier table"],
                    ruled_out=[RuledOut(hypothesis="the column exists under another name",
                                        how="read the customers columns: none is tier-like")],
                    evidence=[real],
                    smallest_unblocking_question=(
                        "Where does a customer's tier come from today: a new column we should add, "
                        "or the loyalty_points threshold in pricing-config.yaml?"
                    ),
                    options=["Add a new customer_tier column",
                             "Use the loyalty_points threshold in pricing-config.yaml"],
                )
            )  # fmt: skip
        return {"escalation": int(accepted.get("escalation")), "log": [*line, "packet handed over"]}

    def wait_for_answer(self, state: Story) -> Story:
        print(f"waiting for a reviewer to answer escalation {state['escalation']}", flush=True)
        answer = self.run.wait_for_answer(state["escalation"], timeout=3600, interval=0.5)
        return {"answer": answer.text, "log": say(state, f"{answer.by} answered: {answer.text}")}

    def work_frontier(self, state: Story) -> Story:
        """Run every task the frontier lets start, each to success, as its agent."""
        frontier = self.run.frontier()
        lines = state.get("log", [])
        for key in frontier.ready:
            task = next(t for t in TASKS if t.key == key)
            context = self.run.context(key)
            try:
                with self.run.task(key, agent=context.agent, prompt_hash=text_hash(f"{key} {context.attempts}"),
                                   context_hash=text_hash(repr(context.ground_truth))) as attempt:  # fmt: skip
                    if task.agent.startswith("coder"):
                        attempt.artifact("pr", f"acme/shop#{key}")
            except Blocked as blocked:  # the frontier moved since it was read: next round
                lines = say({"log": lines}, f"{key} waits: {', '.join(blocked.blockers)}")
                continue
            lines = say({"log": lines}, f"{context.agent}: {key} succeeded")
        return {"log": lines}

    def run_is_over(self, state: Story) -> str:
        detail = self.run.detail()
        if detail.state != "running":
            return "report"
        if not self.run.frontier().ready:
            time.sleep(0.5)  # the worker is still releasing what the last finish unblocked
        return "work_frontier"

    def report(self, state: Story) -> Story:
        detail = self.run.detail()
        lines = say(state, f"run {detail.run}: {detail.state}")
        for claim in detail.claims:
            radius = claim.blast_radius
            if radius is None:
                continue
            lines = say({"log": lines},
                        f"blast radius of {claim.key} ({claim.status}): {radius.agents} agent(s), "
                        f"{radius.artifacts} artifact(s), {radius.minutes:.1f} minutes, tasks {radius.tasks}")  # fmt: skip
        return {"log": lines}


def wait(check: Any, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for Bulkhead's worker")
        time.sleep(0.3)
    return value


def graph(orchestrator: Orchestrator) -> Any:
    builder = StateGraph(Story)
    steps = ["declare", "plan", "confirm_schema", "coder_tries", "wait_for_reframe", "replan",
             "wait_for_answer", "work_frontier", "report"]  # fmt: skip
    for step in steps:
        builder.add_node(step, getattr(orchestrator, step))
    builder.add_edge(START, "declare")
    for before, after in zip(steps[:-2], steps[1:-1], strict=True):
        builder.add_edge(before, after)
    builder.add_conditional_edges(
        "work_frontier", orchestrator.run_is_over, ["work_frontier", "report"]
    )
    builder.add_edge("report", END)
    return builder.compile()


def main() -> int:
    bh = Bulkhead.from_env()
    orders = sqlite3.connect(os.environ["ORDERS_DB"])
    run = os.environ.get("RUN") or f"tier-discounts-langgraph-{int(time.time())}"
    final = graph(Orchestrator(bh, orders, run)).invoke({}, {"recursion_limit": 200})
    return 0 if f"run {run}: succeeded" in final["log"] else 1


if __name__ == "__main__":
    sys.exit(main())
