"""The policy lab: a scenario's outage under global halt, scoped and naive continuation. Pure.

Each step every policy executes its whole frontier, computed by the production `frontier` rule on
the declared graph. An evaluator that also knows the scenario's hidden dependencies (the ground
truth) judges every execution with the same rule: one whose true conditions are false, or whose
prerequisite was executed invalidly, is invalid. Invalid work goes unnoticed while the capability is
down; once it is back, reconciliation finds it and it is done again (rework).

`naive` ignores capabilities and barriers. It is an evaluator control, never a policy for a run:
if the evaluator does not flag its planted invalid executions, the lab cannot be trusted.

This module is the simulator and the lab's public face: scenarios are read in
`runs.simulation_scenarios`, and checked and reported in `runs.simulation_report`.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from runs.claims.hashing import canonical_json, sha256_hex
from runs.frontier import PREREQUISITE, TaskNode, World, frontier
from runs.simulation_report import (
    challenge_verdict,
    corpus_shortfalls,
    findings,
    measures,
    plainly_invalid,
    support_verdict,
    table,
    verify,
)
from runs.simulation_scenarios import (
    CATEGORIES,
    DOMAINS,
    HIDDEN_FIELDS,
    KINDS,
    LAB_POLICIES,
    OBSERVED,
    SCENARIO_FIELDS,
    TASK_FIELDS,
    Expectation,
    Outage,
    Scenario,
    ScenarioError,
    load_scenario,
)

__all__ = [
    "CATEGORIES",
    "DOMAINS",
    "HIDDEN_FIELDS",
    "KINDS",
    "OBSERVED",
    "LAB_POLICIES",
    "SCENARIO_FIELDS",
    "TASK_FIELDS",
    "Expectation",
    "Outage",
    "Scenario",
    "ScenarioError",
    "challenge_verdict",
    "corpus_shortfalls",
    "findings",
    "lab",
    "load_scenario",
    "measures",
    "oracle_outage_tasks",
    "plainly_invalid",
    "result_hash",
    "run_scenario",
    "simulate",
    "support_verdict",
    "table",
    "verify",
    "verify_lab",
]

DONE = "succeeded"
CANCELLED = "cancelled"
HALT = "halt:"


@dataclass
class _Run:
    """One policy's way through a scenario so far: what the simulator carries from step to step."""

    states: dict[str, str]
    valid: dict[str, bool] = field(default_factory=dict)  # executed tasks: was it valid
    released: set[str] = field(default_factory=set)  # stop boundaries a reviewer released
    executions: list[dict[str, Any]] = field(default_factory=list)
    held: dict[str, list[str]] = field(default_factory=dict)  # blockers at the outage start
    redo: set[str] = field(default_factory=set)  # found invalid: their next execution is rework
    views: dict[tuple[int, str, str, bool], TaskNode] = field(default_factory=dict)
    useful: int = 0
    useful_tasks: int = 0
    rework: int = 0
    executed_during_outage: int = 0
    completed_after_restoration: int = 0  # first completions after restoration (not rework)
    declared_violations: int = 0  # executions whose declared conditions were false
    last_step: int = -1
    completed: bool = False


def simulate(scenario: Scenario, policy: str) -> dict[str, Any]:
    """One policy through the scenario: what it executed, when, and what the evaluator found.

    A task the scenario declares `succeeded` (a live run's finished work) is done and valid
    before the first step, one `cancelled` is not to be done; every other task is to be done.
    """
    if policy not in LAB_POLICIES:
        raise ValueError(f"unknown policy {policy!r} (one of {', '.join(LAB_POLICIES)})")
    outage = scenario.outage
    states = {key: _initial(node.state) for key, node in scenario.declared.items()}
    run = _Run(states=states, valid={k: True for k, state in states.items() if state == DONE})
    to_do = {k for k, state in states.items() if state != CANCELLED}
    limit = outage.end + 4 * len(run.states) + 4
    for step in range(limit + 1):
        if step >= outage.end:
            _reconcile(run)
        if all(ok for ok in run.valid.values()) and to_do <= run.valid.keys():
            run.completed = True
            break
        ready = _ready(scenario, policy, run, step)
        if not ready and step >= outage.end:
            break  # nothing can move and nothing will change: stuck
        _execute(scenario, policy, run, ready, step)
    invalid = [e for e in run.executions if not e["valid"]]
    run_wide = sum(1 for codes in run.held.values() if any(c.startswith(HALT) for c in codes))
    return {
        "useful": run.useful,
        "useful_tasks": run.useful_tasks,
        "invalid": len(invalid),
        "rework": run.rework,
        "completed_after_restoration": run.completed_after_restoration,
        "recovery_steps": max(0, run.last_step + 1 - outage.end),
        "completed": run.completed,
        "executed_during_outage": run.executed_during_outage,
        "declared_violations": run.declared_violations,
        "localized_blockers": len(run.held) - run_wide,
        "run_wide_blockers": run_wide,
        # Every task left waiting has its typed blockers recorded, and nothing completed had to
        # be undone: the run can resume from what it kept.
        "checkpoint_kept": policy != "naive" and run.rework == 0,
        "invalid_executions": [
            {"task": e["task"], "step": e["step"], "reasons": e["reasons"]} for e in invalid
        ],
        "held_at_outage_start": run.held,
        "executions": [[e["task"], e["step"]] for e in run.executions],
    }


def oracle_outage_tasks(scenario: Scenario) -> int:
    """The tasks that could truly be done during the outage: scoped on the ground truth."""
    truthful = replace(scenario, declared=scenario.truth)
    return int(simulate(truthful, "scoped")["useful_tasks"])


def run_scenario(scenario: Scenario) -> dict[str, Any]:
    policies = {}
    for policy in LAB_POLICIES:
        result = simulate(scenario, policy)
        policies[policy] = {**result, "hash": result_hash(result)}
    scoped = policies["scoped"]
    possible = oracle_outage_tasks(scenario)
    body = {
        "scenario": scenario.name,
        "domain": scenario.domain,
        "category": scenario.category,
        "title": scenario.title,
        "kinds": sorted(scenario.kinds),
        "complete_declarations": scenario.complete,
        "outage": {
            "capabilities": list(scenario.outage.capabilities),
            "start": scenario.outage.start,
            "steps": scenario.outage.steps,
        },
        # What could truly be done during the outage, and whether scoped's standing still (if it
        # stood still) was right: nothing safe was left.
        "possible_outage_tasks": possible,
        "scoped_no_progress": (
            None
            if scoped["executed_during_outage"]
            else ("correct" if possible == 0 else f"missed {possible}")
        ),
        "policies": policies,
    }
    return {**body, "hash": result_hash(body)}


def lab(scenarios: Iterable[Scenario]) -> dict[str, Any]:
    """Every scenario under every policy, the findings, and one hash of the whole result."""
    ordered = sorted(scenarios, key=lambda s: s.name)
    results = [run_scenario(s) for s in ordered]
    body = {
        "scenarios": results,
        "measures": measures(results),
        "findings": findings(results),
        "support": support_verdict(ordered, results),
        "challenge": challenge_verdict(ordered, results),
    }
    return {**body, "hash": result_hash(body)}


def result_hash(value: Any) -> str:
    """sha256 of the canonical JSON (keys sorted, separators "," and ":")."""
    return sha256_hex(canonical_json(value))


def verify_lab(
    scenarios: Sequence[Scenario], report: Mapping[str, Any], *, minimums: bool = False
) -> list[str]:
    """Every scenario's checks, the corpus minimums of the study (with `minimums`), and that a
    second run gives the same result hash."""
    results = {result["scenario"]: result for result in report["scenarios"]}
    failures = corpus_shortfalls(scenarios) if minimums else []
    failures += [f for scenario in scenarios for f in verify(scenario, results[scenario.name])]
    again = lab(scenarios)["hash"]
    if again != report["hash"]:
        failures.append(f"two runs hashed differently: {report['hash']} and {again}")
    return failures


def _initial(state: str) -> str:
    return state if state in (DONE, CANCELLED) else "pending"


def _reconcile(run: _Run) -> None:
    """The capability is back: reconciliation finds the invalid work, which is done again
    (rework), and a reviewer looks at the stop boundaries that only a person can release."""
    for key in sorted(k for k, ok in run.valid.items() if not ok):
        run.states[key] = "pending"
        del run.valid[key]
        run.redo.add(key)
        run.rework += 1
    run.released = set(run.states)


def _ready(scenario: Scenario, policy: str, run: _Run, step: int) -> tuple[str, ...]:
    """What the policy executes at this step: its frontier on the declared graph."""
    declared = _as_of(scenario.declared, run.states, run.released, run.views)
    if policy == "naive":
        return frontier(_naive(declared), World(claims=scenario.claims)).ready
    down = _down(scenario, step)
    world = World(down=down, roles=scenario.roles, claims=scenario.claims, policy=policy)
    seen = frontier(declared, world)
    if step == scenario.outage.start:
        run.held = {key: list(seen.deferred[key]) for key in sorted(seen.deferred)}
    return seen.ready


def _execute(scenario: Scenario, policy: str, run: _Run, ready: Sequence[str], step: int) -> None:
    """Execute the ready tasks, each judged by the evaluator on the ground truth (and, for the
    support criterion, on the declarations: was a declared condition false)."""
    outage = scenario.outage
    during = outage.start <= step < outage.end
    world = World(down=_down(scenario, step), roles=scenario.roles, claims=scenario.claims)
    judge = frontier(_as_of(scenario.truth, run.states, run.released, run.views), world)
    declared = (
        judge
        if scenario.complete
        else frontier(_as_of(scenario.declared, run.states, run.released, run.views), world)
    )
    outcomes = {}
    for key in ready:
        reasons = list(judge.deferred.get(key, ()))
        reasons += [
            f"tainted:{p}" for p in scenario.truth[key].prerequisites if run.valid.get(p) is False
        ]
        outcomes[key] = not reasons
        run.executions.append({"task": key, "step": step, "valid": not reasons, "reasons": reasons})
        if any(not code.startswith(PREREQUISITE) for code in declared.deferred.get(key, ())):
            run.declared_violations += 1
        if during:
            run.executed_during_outage += 1
            if not reasons:
                run.useful += scenario.declared[key].weight
                run.useful_tasks += 1
        elif step >= outage.end:
            if key in run.redo:
                run.redo.discard(key)
            else:
                run.completed_after_restoration += 1
    for key, ok in outcomes.items():
        run.states[key] = "succeeded"
        run.valid[key] = ok
    if ready:
        run.last_step = step


def _down(scenario: Scenario, step: int) -> frozenset[str]:
    outage = scenario.outage
    return frozenset(outage.capabilities) if outage.start <= step < outage.end else frozenset()


def _as_of(
    tasks: Mapping[str, TaskNode],
    states: Mapping[str, str],
    released: set[str],
    cache: dict[tuple[int, str, str, bool], TaskNode] | None = None,
) -> dict[str, TaskNode]:
    """The tasks in their current states. `cache` keeps each (task, state, released) view, so a
    step builds only the nodes that changed (a long run takes as many steps as tasks)."""
    views = {}
    for key, node in tasks.items():
        state, freed = states[key], node.released or key in released
        memo = (id(tasks), key, state, freed)
        view = cache.get(memo) if cache is not None else None
        if view is None:
            view = replace(node, state=state, released=freed)
            if cache is not None:
                cache[memo] = view
        views[key] = view
    return views


def _naive(nodes: Mapping[str, TaskNode]) -> dict[str, TaskNode]:
    """What naive continuation sees: prerequisites and claims, no capabilities, no barriers."""
    return {
        key: replace(
            node, capabilities=(), reads_state_of=(), effect="none", transaction=None, released=True
        )
        for key, node in nodes.items()
    }
