"""The policy lab: the simulator, its verification, the shipped corpus and the command."""

import copy
import json
from collections import Counter
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from runs import simulation
from runs.simulation import Scenario, ScenarioError, lab, load_scenario, simulate, verify

CORPUS = sorted((Path(__file__).resolve().parents[2] / "runs" / "scenarios").glob("*.json"))


def corpus() -> list[Scenario]:
    return [load_scenario(json.loads(path.read_text()), name=path.stem) for path in CORPUS]


def scenario(**overrides: Any) -> dict[str, Any]:
    """A small software-factory outage: local work beside work that needs the forge."""
    data: dict[str, Any] = {
        "domain": "software_factory",
        "category": "independent",
        "title": "The forge is down",
        "capabilities": ["forge", "workspace"],
        "roles": {"authority": "forge"},
        "outage": {"capability": "forge", "start": 0, "steps": 2},
        "tasks": [
            {"key": "fix", "capabilities": ["workspace"], "weight": 3},
            {"key": "docs", "capabilities": ["workspace"], "weight": 2},
            {"key": "push", "prerequisites": ["fix"], "capabilities": ["forge"]},
            {"key": "release", "prerequisites": ["push"], "effect": "external"},
        ],
        "expect": {"kinds": ["independent", "naive_control"], "invalid": {"naive": ["push"]}},
    }
    data.update(overrides)
    return data


def test_scoped_does_the_independent_work_that_global_halt_leaves_idle() -> None:
    case = load_scenario(scenario(), name="forge")
    halt, scoped = simulate(case, "global_halt"), simulate(case, "scoped")
    assert (halt["useful"], scoped["useful"]) == (0, 5)
    assert scoped["executions"] == [["docs", 0], ["fix", 0], ["push", 2], ["release", 3]]
    assert (halt["recovery_steps"], scoped["recovery_steps"]) == (3, 2)
    assert scoped["held_at_outage_start"]["push"] == ["capability:forge", "prerequisite:fix"]
    assert scoped["invalid"] == halt["invalid"] == 0
    assert verify(case, lab([case])["scenarios"][0]) == []


def test_the_evaluator_catches_naive_work_and_it_is_redone_after_restoration() -> None:
    data = scenario(outage={"capability": "forge", "start": 0, "steps": 3})
    naive = simulate(load_scenario(data, name="forge"), "naive")
    assert naive["invalid_executions"] == [
        {"task": "push", "step": 1, "reasons": ["capability:forge"]},
        {"task": "release", "step": 2, "reasons": ["barrier:authority", "tainted:push"]},
    ]
    assert naive["rework"] == 2
    assert naive["executions"][-2:] == [["push", 3], ["release", 4]]
    assert naive["completed"]


def test_work_on_top_of_invalid_work_is_invalid_too() -> None:
    data = scenario(
        tasks=[
            {"key": "push", "capabilities": ["forge"]},
            {"key": "notify", "prerequisites": ["push"], "capabilities": ["workspace"]},
        ],
        outage={"capability": "forge", "start": 0, "steps": 3},
    )
    naive = simulate(load_scenario(data, name="taint"), "naive")
    assert naive["invalid_executions"][1] == {
        "task": "notify",
        "step": 1,
        "reasons": ["tainted:push"],
    }


def test_a_hidden_dependency_makes_scoped_cross_a_boundary_that_global_halt_keeps() -> None:
    data = scenario(
        hidden={"docs": {"reads_state_of": ["forge"]}},
        expect={"kinds": ["annotation_fault"], "invalid": {"scoped": ["docs"]}},
    )
    case = load_scenario(data, name="hidden")
    assert not case.complete
    scoped, halt = simulate(case, "scoped"), simulate(case, "global_halt")
    assert scoped["invalid_executions"] == [
        {"task": "docs", "step": 0, "reasons": ["barrier:freshness"]}
    ]
    assert halt["invalid"] == 0
    report = lab([case])
    assert verify(case, report["scenarios"][0]) == []
    assert report["findings"] == [
        "hidden: global halt was safer (0 invalid, 0 rework) than scoped (1 invalid, 1 rework)"
    ]


def test_verify_fails_when_the_evaluator_misses_naive_invalid_work() -> None:
    case = load_scenario(scenario(), name="forge")
    result = copy.deepcopy(lab([case])["scenarios"][0])
    result["policies"]["naive"]["invalid"] = 0
    result["policies"]["naive"]["invalid_executions"] = []
    assert verify(case, result) == [
        "forge: naive's invalid execution of push went undetected",
        "forge: the planted naive control executed nothing invalid",
    ]


def test_verify_fails_when_scoped_executes_invalid_work_on_complete_declarations() -> None:
    case = load_scenario(scenario(), name="forge")
    result = copy.deepcopy(lab([case])["scenarios"][0])
    result["policies"]["scoped"]["invalid"] = 1
    result["policies"]["scoped"]["invalid_executions"] = [
        {"task": "push", "step": 0, "reasons": ["capability:forge"]}
    ]
    assert verify(case, result) == [
        "forge: scoped executed invalid work on complete declarations: push"
    ]


def without_expect(**overrides: Any) -> dict[str, Any]:
    data = scenario(**overrides)
    del data["expect"]
    return data


def test_a_scenario_needs_no_expect_block() -> None:
    case = load_scenario(without_expect(), name="plain")
    assert case.expect.kinds == ("independent",)  # its category is checked as its kind
    assert verify(case, lab([case])["scenarios"][0]) == []


def test_without_expect_verify_still_fails_when_naive_invalid_work_goes_undetected() -> None:
    case = load_scenario(without_expect(), name="plain")
    result = copy.deepcopy(lab([case])["scenarios"][0])
    assert [e["task"] for e in result["policies"]["naive"]["invalid_executions"]] == ["push"]
    result["policies"]["naive"]["invalid"] = 0
    result["policies"]["naive"]["invalid_executions"] = []
    assert verify(case, result) == ["plain: naive's invalid execution of push went undetected"]


def test_without_expect_verify_still_fails_when_scoped_crosses_complete_declarations() -> None:
    case = load_scenario(without_expect(), name="plain")
    result = copy.deepcopy(lab([case])["scenarios"][0])
    result["policies"]["scoped"]["invalid"] = 1
    result["policies"]["scoped"]["invalid_executions"] = [
        {"task": "push", "step": 0, "reasons": ["capability:forge"]}
    ]
    assert verify(case, result) == [
        "plain: scoped executed invalid work on complete declarations: push"
    ]


def test_naive_work_on_top_of_invalid_work_must_be_caught_too() -> None:
    data = without_expect(
        tasks=[
            {"key": "push", "capabilities": ["forge"]},
            {"key": "notify", "prerequisites": ["push"], "capabilities": ["workspace"]},
        ],
        outage={"capability": "forge", "start": 0, "steps": 3},
        category="all_blocked",
    )
    case = load_scenario(data, name="taint")
    result = copy.deepcopy(lab([case])["scenarios"][0])
    naive = result["policies"]["naive"]
    naive["invalid_executions"] = [e for e in naive["invalid_executions"] if e["task"] == "push"]
    assert verify(case, result) == ["taint: naive's invalid execution of notify went undetected"]


def test_an_expect_block_must_be_an_object_when_given() -> None:
    with pytest.raises(ScenarioError) as raised:
        load_scenario(scenario(expect=["independent"]), name="odd")
    assert raised.value.errors == ["expect: an object {kinds, held?, invalid?}"]


def test_verify_fails_when_scoped_works_in_an_all_blocked_case() -> None:
    data = scenario(expect={"kinds": ["all_blocked"]})
    case = load_scenario(data, name="mislabelled")
    assert verify(case, lab([case])["scenarios"][0]) == [
        "mislabelled: scoped did work while everything left was blocked"
    ]


def test_verify_fails_when_scoped_does_not_beat_global_halt_on_independent_work() -> None:
    data = scenario(
        tasks=[
            {"key": "push", "capabilities": ["forge"]},
            {"key": "tag", "prerequisites": ["push"]},
        ],
        expect={"kinds": ["independent"]},
    )
    case = load_scenario(data, name="nothing-independent")
    assert verify(case, lab([case])["scenarios"][0]) == [
        "nothing-independent: scoped did not beat global halt (0 vs 0)"
    ]


def test_verify_fails_when_a_barrier_is_not_held() -> None:
    data = scenario(expect={"kinds": ["barrier"], "held": {"docs": "barrier:freshness"}})
    case = load_scenario(data, name="no-barrier")
    assert verify(case, lab([case])["scenarios"][0]) == [
        "no-barrier: scoped did not hold docs with barrier:freshness",
        "no-barrier: scoped executed docs across barrier:freshness",
    ]


def test_a_reviewer_releases_the_uncertain_dependency_stop_after_restoration() -> None:
    data = scenario(
        tasks=[
            {"key": "fix", "capabilities": ["workspace"]},
            {"key": "deploy", "effect": "external", "dependency_confidence": "uncertain"},
        ],
        expect={"kinds": ["independent"]},
    )
    scoped = simulate(load_scenario(data, name="uncertain"), "scoped")
    assert scoped["executions"] == [["fix", 0], ["deploy", 2]]
    assert scoped["held_at_outage_start"] == {
        "deploy": ["barrier:authority", "barrier:uncertain-dependency"]
    }


def test_it_names_every_bad_field_of_a_scenario() -> None:
    data = scenario(
        roles={"owner": "forge", "authority": "pager"},
        outage={"capability": "vpn", "steps": 0},
        tasks=[
            {"key": "a", "capabilities": ["vpn"], "effect": "loud", "colour": "red"},
            {"key": "b", "prerequisites": ["zz"], "weight": -1},
        ],
        hidden={"nobody": {"capabilities": ["forge"]}},
        expect={"kinds": ["barrier", "chaos"]},
        extra=True,
    )
    with pytest.raises(ScenarioError) as raised:
        load_scenario(data, name="broken")
    assert raised.value.errors == [
        "extra: unknown field",
        "roles.authority: 'pager' is not a declared capability",
        "roles.owner: unknown role (one of authority, observability, rollback)",
        "outage.capability: 'vpn' is not a declared capability",
        "outage.steps: a whole number of steps, 1 to 10,000",
        "tasks.0.colour: unknown field",
        "tasks.0.capabilities: 'vpn' is not a declared capability",
        "tasks.0.effect: one of none, reversible, external",
        "tasks.1.weight: a whole number, 0 or more",
        "hidden.nobody: unknown task",
        "expect.kinds: unknown kind 'chaos'",
        "expect.held: a barrier case names the tasks scoped must hold",
    ]


@pytest.mark.parametrize(
    ("outage", "error"),
    [
        ({"steps": 10**12}, "outage.steps: a whole number of steps, 1 to 10,000"),
        ({"steps": 2.5}, "outage.steps: a whole number of steps, 1 to 10,000"),
        ({"steps": 3, "start": 10**9}, "outage.start: a whole step number, 0 to 10,000"),
        ({"steps": 3, "start": -1}, "outage.start: a whole step number, 0 to 10,000"),
    ],
)
def test_an_outage_beyond_the_steps_it_can_walk_is_refused(outage, error) -> None:
    """A trillion steps never finished (the simulation walks each): a clear error instead."""
    data = scenario(outage={"capability": "forge", **outage})
    with pytest.raises(ScenarioError) as raised:
        load_scenario(data, name="huge")
    assert raised.value.errors == [error]


def test_a_task_key_with_a_control_character_is_refused_naming_it() -> None:
    data = scenario(tasks=[{"key": "fix\x00bug"}, {"key": "b", "prerequisites": ["fix\x00bug"]}])
    with pytest.raises(ScenarioError) as raised:
        load_scenario(data, name="nul")
    assert raised.value.errors[0] == "tasks.0.key: must not contain control characters"


def test_it_rejects_a_cycle_hidden_or_declared() -> None:
    data = scenario(
        tasks=[{"key": "a", "prerequisites": ["b"]}, {"key": "b"}],
        hidden={"b": {"prerequisites": ["a"]}},
        expect={"kinds": ["annotation_fault"], "invalid": {"scoped": ["a"]}},
    )
    with pytest.raises(ScenarioError, match="cycle"):
        load_scenario(data, name="loop")


def test_naive_is_an_evaluator_control_not_a_run_policy() -> None:
    case = load_scenario(scenario(), name="forge")
    with pytest.raises(ValueError, match="unknown policy"):
        simulate(case, "optimistic")


# The shipped corpus.


def test_the_corpus_passes_verification() -> None:
    scenarios = corpus()
    report = lab(scenarios)
    assert simulation.verify_lab(scenarios, report) == []


def test_the_corpus_covers_four_domains_and_every_kind_of_case() -> None:
    scenarios = corpus()
    kinds = Counter(kind for s in scenarios for kind in s.expect.kinds)
    assert kinds["independent"] >= 4
    assert kinds["all_blocked"] >= 4
    assert kinds["barrier"] >= 4
    assert kinds["naive_control"] >= 1
    domains = {s.domain for s in scenarios}
    assert domains == {"software_factory", "sre", "customer_support", "research_operations"}
    for domain in domains:
        assert any(
            s.domain == domain and "annotation_fault" in s.expect.kinds and not s.complete
            for s in scenarios
        )
    held = {blocker for s in scenarios for blocker in s.expect.held.values()}
    assert held == {
        "barrier:freshness",
        "barrier:authority",
        "barrier:observability",
        "barrier:rollback",
        "barrier:transaction",
    }


def test_scoped_never_crosses_a_declared_boundary_in_the_corpus() -> None:
    for result in lab(corpus())["scenarios"]:
        if result["complete_declarations"]:
            assert result["policies"]["scoped"]["invalid"] == 0, result["scenario"]


def test_two_runs_give_the_same_result_hash() -> None:
    assert lab(corpus())["hash"] == lab(list(reversed(corpus())))["hash"]


EVIDENCE = (
    CORPUS[0].parents[2] / "docs" / "research" / "evidence" / "scoped-progress-partial-failure"
)


def test_the_kept_evidence_is_what_the_command_writes(tmp_path: Path) -> None:
    # `make policy-lab` keeps the inputs, the raw results and the table; they must be current.
    call_command("policy_lab", "--verify", "--write-results", str(tmp_path), stdout=StringIO())
    report = lab(corpus())
    kept = json.loads((EVIDENCE / "results.json").read_text())
    assert kept == json.loads((tmp_path / "results.json").read_text()) == report
    assert (EVIDENCE / "results.md").read_text() == (tmp_path / "results.md").read_text()
    assert simulation.table(report) in (EVIDENCE / "results.md").read_text()
    assert f"Result hash: `{report['hash']}`" in (EVIDENCE / "results.md").read_text()
    for path in CORPUS:
        assert json.loads((EVIDENCE / "inputs" / path.name).read_text()) == json.loads(
            path.read_text()
        )
    assert len(list((EVIDENCE / "inputs").glob("*.json"))) == len(CORPUS)


# The command.


def test_policy_lab_prints_the_table_and_verifies() -> None:
    out = StringIO()
    call_command("policy_lab", *map(str, CORPUS), "--verify", stdout=out)
    printed = out.getvalue()
    assert printed.startswith("scenario ")
    assert "sre-telemetry-observability" in printed
    assert printed.rstrip().endswith(f"verify: ok ({len(CORPUS)} scenarios)")


def test_policy_lab_prints_json() -> None:
    out = StringIO()
    call_command("policy_lab", str(CORPUS[0]), "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["hash"] == lab(corpus()[:1])["hash"]
    assert set(report["scenarios"][0]["policies"]) == {"global_halt", "scoped", "naive"}


def test_policy_lab_verify_exits_non_zero_when_a_check_fails(tmp_path: Path) -> None:
    path = tmp_path / "mislabelled.json"
    path.write_text(json.dumps(scenario(expect={"kinds": ["all_blocked"]})))
    with pytest.raises(CommandError, match="scoped did work while everything left was blocked"):
        call_command("policy_lab", str(path), "--verify", stdout=StringIO())
    call_command("policy_lab", str(path), stdout=StringIO())  # without --verify it only reports


def test_policy_lab_verifies_a_scenario_without_expect(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(without_expect()))
    out = StringIO()
    call_command("policy_lab", str(path), "--verify", "--without-minimums", stdout=out)
    assert out.getvalue().rstrip().endswith("verify: ok (1 scenarios)")

    real = simulation.simulate

    def blind(case: Scenario, policy: str) -> dict[str, Any]:
        result = real(case, policy)
        if policy == "naive":  # an evaluator that misses naive's invalid work
            result = {**result, "invalid": 0, "invalid_executions": []}
        return result

    monkeypatch.setattr(simulation, "simulate", blind)
    with pytest.raises(CommandError, match="naive's invalid execution of push went undetected"):
        call_command("policy_lab", str(path), "--verify", "--without-minimums", stdout=StringIO())


def test_policy_lab_names_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(CommandError, match="broken.json: not JSON"):
        call_command("policy_lab", str(path))


def test_results_that_cannot_be_written_are_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(
        CommandError, match=r"--write-results: cannot write the results under .*a-file"
    ):
        call_command(
            "policy_lab", "--write-results", str(tmp_path / "a-file" / "results"), stdout=StringIO()
        )
