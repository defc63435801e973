"""policy_lab --from-runs: a fleet's finished runs and the outages they saw, as the lab's corpus."""

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command

from fleet import demo, services
from fleet.stories import forge_outage, hung_test_run, play
from runs.lab_runs import _outages, fleet_scenarios
from runs.models import Run
from tests.acceptance.conftest import fleet_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_prints_the_demo_fleets_table(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    demo.load()
    out = StringIO()

    call_command("policy_lab", "--from-runs", "demo", "--verify", stdout=out)

    printed = out.getvalue()
    # The hung test run finished while the forge was down: the one finished run that saw it.
    assert printed.startswith("scenario ")
    assert f"\n{hung_test_run.RUN}  global_halt " in printed
    assert f"\n{hung_test_run.RUN}  scoped " in printed
    assert "your runs: over 1 outage(s) they saw" in printed
    assert "result hash: " in printed
    assert printed.rstrip().endswith("verify: ok (1 scenarios)")
    # A run that is still going is not in it.
    assert forge_outage.RUN not in printed


def test_a_finished_run_that_saw_an_outage_is_simulated_from_what_it_had_done():
    fleet = fleet_for(forge_outage.STORY)
    play(fleet, forge_outage.STORY)  # down, the local work, back up
    Run.objects.filter(key=forge_outage.RUN).update(
        state=Run.State.SUCCEEDED, finished_at=Run.objects.get().started_at.replace(year=2100)
    )

    [(name, data)] = fleet_scenarios(fleet=fleet).items()

    assert name == forge_outage.RUN
    assert data["outage"]["capabilities"] == ["forge"]
    assert data["outage"]["steps"] == 4  # the four local tasks finished while it was down
    assert not any(t.get("state") for t in data["tasks"])  # nothing was done before it
    out = StringIO()
    call_command("policy_lab", "--from-runs", fleet.name, "--json", stdout=out)
    report = json.loads(out.getvalue())
    [result] = report["scenarios"]
    assert result["policies"]["scoped"]["useful_tasks"] == 4
    assert result["policies"]["global_halt"]["useful_tasks"] == 0


def test_an_unknown_fleet_or_one_without_finished_runs_is_named(db):
    with pytest.raises(CommandError, match="--from-runs: no fleet named 'nobody'"):
        call_command("policy_lab", "--from-runs", "nobody", stdout=StringIO())
    services.fleet_create(name="empty")
    with pytest.raises(CommandError, match="fleet 'empty' has no finished run that saw an outage"):
        call_command("policy_lab", "--from-runs", "empty", stdout=StringIO())


T0 = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def change(name: str, status: str, minute: int) -> tuple[dict[str, str], datetime]:
    return {"capability": name, "status": status}, at(minute)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ([], []),
        ([change("forge", "down", 12), change("forge", "up", 15)], [(("forge",), 12, 15)]),
        ([change("forge", "down", 5), change("forge", "up", 15)], [(("forge",), 10, 15)]),
        ([change("forge", "down", 12)], [(("forge",), 12, None)]),
        ([change("forge", "down", 31), change("forge", "up", 35)], []),
        ([change("forge", "down", 2), change("forge", "up", 5)], []),
        (
            [change("forge", "down", 12), change("ci", "down", 13), change("forge", "up", 14),
             change("ci", "up", 16), change("ci", "down", 20), change("ci", "up", 22)],
            [(("ci", "forge"), 12, 16), (("ci",), 20, 22)],
        ),
    ],
    ids=["none", "during", "down-before-the-run", "never-back", "after-the-run", "before-the-run",
         "overlapping-then-another"],
)  # fmt: skip
def test_the_outages_a_run_saw(changes, expected):
    run = SimpleNamespace(started_at=at(10), finished_at=at(30))

    found = _outages(run, changes)

    assert found == [
        (names, at(start), at(end) if end is not None else None) for names, start, end in expected
    ]
