"""The policy lab's report: the predeclared checks of each scenario, the findings, the table. Pure."""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runs.simulation_scenarios import LAB_POLICIES, Scenario


def verify(scenario: Scenario, result: Mapping[str, Any]) -> list[str]:
    """The predeclared checks that apply to this scenario; every failure, named."""
    failures: list[str] = []
    policies = result["policies"]
    scoped, halt = policies["scoped"], policies["global_halt"]
    name = scenario.name
    expected = {policy: set(tasks) for policy, tasks in scenario.expect.invalid.items()}
    # Whatever the scenario expects, naive's plainly invalid work must be caught.
    expected.setdefault("naive", set()).update(
        plainly_invalid(scenario, policies["naive"]["executions"])
    )
    for policy, tasks in sorted(expected.items()):
        flagged = {e["task"] for e in policies[policy]["invalid_executions"]}
        for task in sorted(tasks - flagged):
            failures.append(f"{name}: {policy}'s invalid execution of {task} went undetected")
    kinds = scenario.expect.kinds
    if "naive_control" in kinds and not policies["naive"]["invalid"]:
        failures.append(f"{name}: the planted naive control executed nothing invalid")
    if scenario.complete and scoped["invalid"]:
        crossed = ", ".join(sorted({e["task"] for e in scoped["invalid_executions"]}))
        failures.append(f"{name}: scoped executed invalid work on complete declarations: {crossed}")
    if "all_blocked" in kinds and scoped["executed_during_outage"]:
        failures.append(f"{name}: scoped did work while everything left was blocked")
    if "independent" in kinds and not scoped["useful"] > halt["useful"]:
        failures.append(
            f"{name}: scoped did not beat global halt ({scoped['useful']} vs {halt['useful']})"
        )
    if "barrier" in kinds:
        during = range(scenario.outage.start, scenario.outage.end)
        ran = {task for task, step in scoped["executions"] if step in during}
        for task, blocker in sorted(scenario.expect.held.items()):
            if blocker not in scoped["held_at_outage_start"].get(task, []):
                failures.append(f"{name}: scoped did not hold {task} with {blocker}")
            if task in ran:
                failures.append(f"{name}: scoped executed {task} across {blocker}")
    for policy in ("global_halt", "scoped"):
        if not policies[policy]["completed"]:
            failures.append(f"{name}: {policy} did not complete the run after restoration")
    return failures


def plainly_invalid(scenario: Scenario, executions: Iterable[Sequence[Any]]) -> set[str]:
    """Tasks executed while a condition the outage makes false held them, or on top of such work.

    An independent check of the evaluator, without the frontier rule or the scenario's `expect`:
    during the outage, a task that truly needs the capability (or reads its state), or an
    external effect while the capability is the fleet's authority, observability or rollback.
    A lower bound: the evaluator may find more (barriers, transactions, claims).
    """
    outage = scenario.outage
    guards_effects = outage.capability in scenario.roles.values()
    latest_invalid: dict[str, bool] = {}
    found: set[str] = set()
    for task, step in executions:
        node = scenario.truth[task]
        needs = (
            outage.capability in node.capabilities
            or outage.capability in node.reads_state_of
            or (node.effect == "external" and guards_effects)
        )
        invalid = (outage.start <= step < outage.end and needs) or any(
            latest_invalid.get(p, False) for p in node.prerequisites
        )
        latest_invalid[task] = invalid
        if invalid:
            found.add(task)
    return found


def findings(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the challenge plan asks to record: where global halt was safer or cheaper."""
    found = []
    for result in results:
        scoped, halt = result["policies"]["scoped"], result["policies"]["global_halt"]
        if (halt["invalid"], halt["rework"]) < (scoped["invalid"], scoped["rework"]):
            found.append(
                f"{result['scenario']}: global halt was safer ({halt['invalid']} invalid, "
                f"{halt['rework']} rework) than scoped ({scoped['invalid']} invalid, "
                f"{scoped['rework']} rework)"
            )
    return found


def table(report: Mapping[str, Any]) -> str:
    """The plain text table: one row per scenario and policy."""
    header = ("scenario", "policy", "useful", "invalid", "rework", "recovery", "hash")
    rows = [header]
    for result in report["scenarios"]:
        for policy in LAB_POLICIES:
            r = result["policies"][policy]
            rows.append(
                (
                    result["scenario"],
                    policy,
                    str(r["useful"]),
                    str(r["invalid"]),
                    str(r["rework"]),
                    str(r["recovery_steps"]),
                    r["hash"][:12],
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = {2, 3, 4, 5}
    lines = [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    totals = {p: sum(r["policies"][p]["useful"] for r in report["scenarios"]) for p in LAB_POLICIES}
    invalid = {
        p: sum(r["policies"][p]["invalid"] for r in report["scenarios"]) for p in LAB_POLICIES
    }
    lines.append("")
    lines.append(
        "useful outage work: "
        + ", ".join(f"{p} {totals[p]}" for p in LAB_POLICIES)
        + "; invalid executions: "
        + ", ".join(f"{p} {invalid[p]}" for p in LAB_POLICIES)
    )
    lines += [f"finding: {line}" for line in report["findings"]]
    lines.append(f"result hash: {report['hash']}")
    return "\n".join(lines)
