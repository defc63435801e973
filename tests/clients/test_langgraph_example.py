"""The LangGraph example runs the seed's all-green story against a live Bulkhead: the planner's
claim refuted, the planner reframed, the second agreeing failure escalated, a reviewer's answer
received (this test answers as the reviewer), the run finished, the blast radius printed."""

import os
import subprocess
import sys

import pytest
from django.test import Client

from escalations.models import Escalation
from fleet import services
from fleet.stories import all_green
from runs.models import Attempt, Run
from tests.clients.conftest import ROOT, credentials
from tests.conftest import eventually

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
EXAMPLE = ROOT / "examples" / "langgraph_all_green" / "orchestrator.py"


def test_the_langgraph_example_runs_the_all_green_story_to_the_end(live_app, tmp_path):
    fleet = services.fleet_create(name="acme")
    orch = credentials(live_app, fleet, "orchestrator", orchestrator=True)
    for name in ("planner", "schema", "coder-a", "coder-b"):
        credentials(live_app, fleet, name)
    orders = tmp_path / "orders.sqlite3"
    all_green.build_orders(orders)
    services.source_add(fleet=fleet, kind="datasource", name="orders", value=str(orders))
    env = {
        **os.environ,
        "BULKHEAD_ENDPOINT": orch.endpoint,
        "BULKHEAD_SECRET": orch.secret,
        "BULKHEAD_TOKEN": orch.token,
        "ORDERS_DB": str(orders),
        "RUN": "tier-discounts-langgraph",
    }
    log = tmp_path / "example.log"
    with open(log, "w") as out:
        example = subprocess.Popen(
            [sys.executable, str(EXAMPLE)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
    try:
        # The example hands over its packet (the agent's, not the draft) and waits for a person.
        escalation = eventually(
            lambda: Escalation.objects.filter(
                task__key="plan", status="open", packet__drafted=False
            ).first(),
            timeout=120,
            what="the example's packet:\n" + log.read_text(),
        )
        assert example.poll() is None, log.read_text()
        # No coder started on the refuted plan.
        assert not Attempt.objects.filter(task__agent__name__startswith="coder").exists()
        alice, _ = services.member_add(username="alice", fleet=fleet, role="reviewer")
        browser = Client()
        browser.force_login(alice)
        response = browser.post(f"/escalations/{escalation.pk}/answer/", {"text": all_green.ANSWER})
        assert response.status_code == 302
        example.wait(timeout=180)
    finally:
        if example.poll() is None:
            example.kill()
    output = log.read_text()
    (ROOT / "var").mkdir(exist_ok=True)
    (ROOT / "var" / "langgraph-example.log").write_text(output)  # for a look after CI
    assert example.returncode == 0, output
    lines = output.splitlines()
    assert (
        "schema: plan.tier-source refuted by the customers columns ['id', 'name', 'email', 'loyalty_points']"
        in lines
    )
    assert "coder-a may not start: claim:plan.tier-source" in lines
    assert any(line.startswith("planner reframed: ") for line in lines), output
    assert f"alice answered: {all_green.ANSWER}" in lines
    assert "run tier-discounts-langgraph: succeeded" in lines
    assert Run.objects.get(key="tier-discounts-langgraph").state == "succeeded"
    # The refuted claim travelled to nobody else: 1 agent, no artifact, in the server's figures.
    [refuted] = [
        line
        for line in lines
        if line.startswith("blast radius of plan.tier-source@refuted-1 (refuted): ")
    ]
    assert "1 agent(s), 0 artifact(s)" in refuted, output
