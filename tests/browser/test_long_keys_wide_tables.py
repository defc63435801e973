"""Keys and names at their limits (a 150-character unicode run key, 200-character task and claim
keys, a 100-character agent name) in a real browser at desktop and phone width: the run page,
the reports and the delivery log break them in their cells, so no table is wider than its box
and, on a desktop, every column is in sight."""

from typing import Any

import pytest
from django.utils import timezone

from fleet.models import Delivery
from runs.models import Attempt, Claim, ClaimUse, Task
from tests.conftest import make_sender
from tests.escalations.desk import member

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "correct horse battery staple"
RUN = "ü" * 150
PLAN, CHECK, CLAIM = "p" * 200, "k" * 200, "c" * 200
AGENT = "L" + "o" * 98 + "g"
ATTEMPT = {"prompt_hash": "p", "context_hash": "c"}

# Each table's width against its box's, and each header cell's right edge against the window.
MEASURE = """() => [...document.querySelectorAll('main table')].map(t => {
  const box = t.parentElement;
  return {
    table: (t.querySelector('caption, th') || t).textContent.trim().slice(0, 40),
    width: Math.round(t.getBoundingClientRect().width),
    box: box.clientWidth,
    scrolls: box.scrollWidth > box.clientWidth + 1,
    hidden: [...t.querySelectorAll('thead th')]
      .filter(th => th.getBoundingClientRect().right > window.innerWidth + 1)
      .map(th => th.textContent.trim()),
  };
})"""


def long_keyed_run(client: Any, fleet: Any) -> int:
    planner = make_sender(client, fleet, "planner", role="planning", orchestrator=True)
    checker = make_sender(client, fleet, AGENT, role="checking")
    tasks = [
        {"key": PLAN, "agent": "planner"},
        {"key": CHECK, "agent": AGENT, "prerequisites": [PLAN], "checks": [CLAIM]},
    ]
    assert planner.post("run.started", {"run": RUN, "tasks": tasks}).status_code == 202
    planner.post("task.started", {"run": RUN, "task": PLAN, "attempt": ATTEMPT})
    claim = {"key": CLAIM, "statement": "`widgets.color` exists", "load_bearing": True}
    planner.post("claim.posted", {"run": RUN, "task": PLAN, "claim": claim})
    planner.post("task.finished", {"run": RUN, "task": PLAN, "outcome": "succeeded"})
    checker.post("task.started", {"run": RUN, "task": CHECK, "attempt": ATTEMPT})
    failure = {"kind": "reasoning", "signature": "sig", "message": "m"}
    checker.post(
        "task.finished", {"run": RUN, "task": CHECK, "outcome": "failed", "failure": failure}
    )
    # The checker read the claim before any verdict: a handoff from planner to the long name.
    checked = Claim.objects.get(key=CLAIM)
    ClaimUse.objects.get_or_create(
        claim=checked, task=Task.objects.get(key=CHECK), defaults={"at": checked.posted_at}
    )
    again = Attempt.objects.get(task__key=CHECK, number=1)
    again.pk, again.number, again.failure_kind = None, 2, ""  # a same-context retry, for its table
    again.save()
    fleet.callback_url = "https://agents.example.com/hooks"
    fleet.save()
    for n, kind in enumerate(("task.ready", "run.failed")):
        Delivery.objects.create(
            fleet=fleet,
            webhook_id=f"msg_{n}",
            type=kind,
            payload={"type": kind, "data": {"run": RUN, "task": CHECK, "cause": f"{CHECK} failed"}},
            status="failed",
            attempts=1,
            last_status_code=500,
            last_error="e" * 300,
            next_attempt_at=timezone.now(),
        )
    return Attempt.objects.get(task__key=CHECK, number=1).task.run_id


@pytest.mark.parametrize(("width", "name"), [(1280, "desktop"), (390, "phone")])
def test_long_keys_keep_the_run_page_reports_and_deliveries_tables_within_their_boxes(
    client, fleet, screens, width, name
):
    run_id = long_keyed_run(client, fleet)
    member("carol", fleet, role="manager")
    screen = screens()
    page = screen.page
    page.set_viewport_size({"width": width, "height": 900})
    screen.sign_in("carol", PASSWORD)

    for path, shot in (
        (f"/runs/{run_id}/", "run"),
        ("/reports/?days=all", "reports"),
        ("/deliveries/", "deliveries"),
    ):
        page.goto(path)
        screen.shot(f"{shot}-long-keys-{name}")
        assert page.evaluate("document.documentElement.scrollWidth") <= width, path
        tables = page.evaluate(MEASURE)
        assert tables, path
        for table in tables:
            assert table["width"] <= table["box"] + 1, (path, table)
            assert not table["scrolls"], (path, table)
            if width == 1280:
                assert table["hidden"] == [], (path, table)
        if shot == "reports":  # the chart's axis shows the key's start, not 150 characters
            page.wait_for_selector("#blast-chart[data-drawn='1']", state="attached")
            labels = page.evaluate(
                "() => Chart.getChart('blast-chart').scales.x.ticks.map(t => t.label)"
            )
            assert labels == [RUN[:23] + "\u2026"], labels
    assert not screen.problems, screen.problems
