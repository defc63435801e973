"""What-if on a live run: the lab's comparison on the run's own graph, read-only."""

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import ApiToken, Fleet
from fleet.stories import forge_outage, play
from runs import lab_runs, simulation
from runs.models import Task
from tests.acceptance.conftest import fleet_for

pytestmark = pytest.mark.django_db
RUN = forge_outage.RUN


@pytest.fixture
def fleet() -> Fleet:
    fleet = fleet_for(forge_outage.STORY)
    play(fleet, forge_outage.STORY, [0])  # the run has started; nothing has run yet
    return fleet


def token(fleet: Fleet) -> str:
    _, issued = ApiToken.issue(fleet.agents.order_by("created_at").first())
    return issued


def get(client: Any, fleet: Fleet, query: str, bearer: str | None = None) -> Any:
    bearer = bearer or token(fleet)
    return client.get(f"/api/v1/runs/{RUN}/what-if?{query}", HTTP_AUTHORIZATION=f"Bearer {bearer}")


def the_lab_on_the_story(steps: int) -> dict[str, Any]:
    """The same run as a scenario file: the policy lab's own answer."""
    tasks = [
        {k: v for k, v in t.items() if k != "agent" and k != "title"} for t in forge_outage.TASKS
    ]
    data = {
        "domain": "software_factory",
        "category": "independent",
        "title": "Repository initialisation",
        "capabilities": ["forge"],
        "outage": {"capability": "forge", "start": 0, "steps": steps},
        "tasks": tasks,
    }
    return simulation.run_scenario(simulation.load_scenario(data, name=RUN))


def test_it_agrees_with_the_lab_on_the_forge_outage(client, fleet):
    response = get(client, fleet, "down=forge&steps=3")

    assert response.status_code == 200, response.json()
    body = response.json()
    scoped, halt = body["policies"]["scoped"], body["policies"]["global_halt"]
    assert scoped["useful_tasks"] == 4 and halt["useful_tasks"] == 0
    assert scoped["during_outage"] == sorted(forge_outage.LOCAL)
    assert halt["during_outage"] == []
    assert body["policies"]["naive"]["invalid_tasks"] == sorted(forge_outage.FORGE)
    lab = the_lab_on_the_story(3)["policies"]
    for policy in ("global_halt", "scoped", "naive"):
        for measure in ("useful", "invalid", "rework", "recovery_steps", "completed"):
            assert body["policies"][policy][measure] == lab[policy][measure], (policy, measure)
    assert (body["down"], body["steps"], body["to_do"]) == (["forge"], 3, 8)


def test_it_starts_from_the_runs_current_state(client, fleet):
    play(fleet, forge_outage.STORY, range(1, forge_outage.FORGE_BACK))  # forge down, local done

    body = get(client, fleet, "down=forge&steps=2").json()

    assert body["to_do"] == 4 and body["already_down"] == []
    assert body["policies"]["scoped"]["useful_tasks"] == 0  # nothing safe is left
    assert body["policies"]["scoped"]["completed"]


def test_it_writes_nothing_and_schedules_nothing(client, fleet):
    states = dict(Task.objects.values_list("key", "state"))
    bearer = token(fleet)
    with CaptureQueriesContext(connection) as queries:
        assert get(client, fleet, "down=forge&steps=3", bearer).status_code == 200
    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
        and "fleet_apitoken" not in q["sql"]  # the token's last use, by the authentication
    ]
    assert writes == []
    assert dict(Task.objects.values_list("key", "state")) == states


@pytest.mark.parametrize(
    ("query", "loc", "msg"),
    [
        ("down=moon&steps=3", "down", "unknown capability 'moon' (one of forge)"),
        ("steps=3", "down", "choose at least one capability to take down"),
        ("down=forge&steps=0", "steps", "a whole number of steps from 1 to 100"),
        ("down=forge&steps=three", "steps", "a whole number of steps from 1 to 100"),
        ("down=forge", "steps", "a whole number of steps from 1 to 100"),
        ("down=forge&steps=101", "steps", "a whole number of steps from 1 to 100"),
        (
            "down=forge&steps=3&steps=4",
            "steps",
            "given 2 times: give one number of steps from 1 to 100",
        ),
        ("down=forge&steps=%EF%BC%93", "steps", "a whole number of steps from 1 to 100"),
    ],
    ids=[
        "unknown-capability",
        "no-capability",
        "zero-steps",
        "not-a-number",
        "no-steps",
        "too-many",
        "steps-twice",
        "not-ascii-digits",
    ],
)
def test_bad_input_is_a_422_naming_the_parameter(client, fleet, query, loc, msg):
    response = get(client, fleet, query)

    assert response.status_code == 422
    assert response.json() == {"errors": [{"loc": loc, "msg": msg}]}


def test_it_needs_a_token(client, fleet):
    response = client.get(f"/api/v1/runs/{RUN}/what-if?down=forge&steps=3")

    assert response.status_code == 401


def test_a_run_too_large_to_simulate_in_a_request_is_refused_naming_it(client, fleet, monkeypatch):
    monkeypatch.setattr(lab_runs, "MAX_TASKS", 7)  # the story's run has 8 tasks to do

    response = get(client, fleet, "down=forge&steps=3")

    assert response.status_code == 422
    [problem] = response.json()["errors"]
    assert problem["loc"] == "run"
    assert problem["msg"].startswith(
        "the what-if takes runs of up to 7 tasks still to do; this one has 8"
    )


def test_the_page_refuses_steps_given_twice_as_the_api_does(fleet):
    from runs.models import Run
    from tests.conftest import signed_in
    from tests.escalations.desk import member

    run = Run.objects.get(key=RUN)
    browser = signed_in(member("carol", fleet, role="manager"))
    response = browser.get(f"/runs/{run.pk}/what-if/?down=forge&steps=3&steps=4")

    assert response.status_code == 422
    assert "given 2 times: give one number of steps from 1 to 100" in response.content.decode()


def test_the_page_visited_without_a_question_shows_the_form_refusing_nothing(fleet):
    from runs.models import Run
    from tests.conftest import signed_in
    from tests.escalations.desk import member

    run = Run.objects.get(key=RUN)
    browser = signed_in(member("carol", fleet, role="manager"))
    response = browser.get(f"/runs/{run.pk}/what-if/")

    page = response.content.decode()
    assert response.status_code == 200 and 'name="steps"' in page
    assert "choose at least one capability" not in page
    refused = browser.get(f"/runs/{run.pk}/what-if/?steps=3")
    assert refused.status_code == 422
    assert "choose at least one capability" in refused.content.decode()
