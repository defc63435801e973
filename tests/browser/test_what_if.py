"""What-if on the forge-outage run in a browser: the page, the API and the lab agree."""

import json

import pytest

from fleet import services
from fleet.stories import forge_outage, play
from runs import simulation
from runs.models import Run, Task
from tests.acceptance.conftest import fleet_for
from tests.browser.conftest import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "correct horse battery staple"


def test_the_what_if_page_and_api_agree_with_the_lab_on_the_forge_outage(screens):
    fleet = fleet_for(forge_outage.STORY)
    play(fleet, forge_outage.STORY, [0])  # the run has started: nothing has run yet
    user, _ = services.member_add(username="mia", fleet=fleet, role="manager")
    user.set_password(PASSWORD)
    user.save()
    run = Run.objects.get(key=forge_outage.RUN)
    states = dict(Task.objects.values_list("key", "state"))
    tasks = [
        {k: v for k, v in t.items() if k not in ("agent", "title")} for t in forge_outage.TASKS
    ]
    data = {
        "domain": "software_factory",
        "category": "independent",
        "title": "Repository initialisation",
        "capabilities": ["forge"],
        "outage": {"capability": "forge", "start": 0, "steps": 3},
        "tasks": tasks,
    }
    lab = simulation.run_scenario(simulation.load_scenario(data, name=run.key))["policies"]
    assert lab["scoped"]["useful_tasks"] == 4 and lab["global_halt"]["useful_tasks"] == 0

    screen = screens()
    screen.sign_in("mia", PASSWORD)
    page = screen.page
    page.goto(f"/runs/{run.pk}/")
    section = page.get_by_role("region", name="What if a capability went down now?")
    section.get_by_role("checkbox", name="forge").check()
    section.get_by_label("for steps").fill("3")
    section.screenshot(path=str(screen.shot("what-if-run-page")))
    section.get_by_role("button", name="Compare").click()

    expect()(page.get_by_role("heading", level=1)).to_have_text(f"What if, on run {run.key}")
    scoped = page.locator("tr[data-policy='scoped']")
    halt = page.locator("tr[data-policy='global halt']")
    expect()(scoped.locator("[data-measure='useful-tasks']")).to_have_text("4")
    expect()(halt.locator("[data-measure='useful-tasks']")).to_have_text("0")
    for key in forge_outage.LOCAL:
        expect()(scoped).to_contain_text(key)
    for name, policy in (("scoped", "scoped"), ("global halt", "global_halt")):
        row = page.locator(f"tr[data-policy='{name}']")
        expect()(row.locator("[data-measure='invalid']")).to_have_text(str(lab[policy]["invalid"]))
        expect()(row.locator("[data-measure='rework']")).to_have_text(str(lab[policy]["rework"]))
    screen.shot("what-if-forge-outage-desktop")
    page.set_viewport_size({"width": 390, "height": 844})
    screen.shot("what-if-forge-outage-mobile")

    assert not screen.problems, screen.problems
    # The page's link to the same comparison in the API, read with the page's session.
    href = page.get_by_role("link", name="the API").get_attribute("href")
    assert href == f"/api/v1/runs/{run.key}/what-if?down=forge&steps=3&fleet={run.fleet.name}"
    body = json.loads(page.request.get(href).text())
    assert body["policies"]["scoped"]["useful_tasks"] == 4
    assert body["policies"]["global_halt"]["useful_tasks"] == 0
    for policy in ("global_halt", "scoped"):
        for measure in ("useful", "invalid", "rework", "recovery_steps"):
            assert body["policies"][policy][measure] == lab[policy][measure]
    # Read-only: nothing ran, nothing was scheduled.
    assert dict(Task.objects.values_list("key", "state")) == states


def test_a_bad_number_of_steps_is_named_on_the_page(screens):
    fleet = fleet_for(forge_outage.STORY)
    play(fleet, forge_outage.STORY, [0])
    user, _ = services.member_add(username="mia", fleet=fleet, role="manager")
    user.set_password(PASSWORD)
    user.save()
    run = Run.objects.get(key=forge_outage.RUN)
    screen = screens()
    screen.sign_in("mia", PASSWORD)

    response = screen.page.goto(f"/runs/{run.pk}/what-if/?down=forge&steps=0")

    assert response is not None and response.status == 422
    alert = screen.page.get_by_role("alert")
    expect()(alert).to_have_text("steps: a whole number of steps from 1 to 100")
