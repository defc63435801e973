"""The demo's halted consumer: a verified claim refuted under a running coder, on PostgreSQL with
a real worker; the coder's callback is a loopback receiver that checks each signature."""

import pytest

from fleet import services
from fleet.stories import all_green, halted_consumer, play
from runs.models import Claim, Halt, Task
from tests.acceptance.conftest import api, fleet_for
from tests.conftest import Receiver, eventually, hook, receiving

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
STORY = halted_consumer.STORY
RUN = halted_consumer.RUN
CLAIM = halted_consumer.CLAIM


@pytest.fixture
def receiver():
    yield from receiving()


@pytest.fixture
def fleet(tmp_path, receiver: Receiver):
    fleet = hook(fleet_for(STORY), receiver)
    all_green.build_orders(tmp_path / "orders.sqlite3")
    halted_consumer.build_repository(tmp_path / "repo")
    services.source_add(
        fleet=fleet, kind="datasource", name="orders", value=str(tmp_path / "orders.sqlite3")
    )
    services.source_add(
        fleet=fleet, kind="workspace", name=halted_consumer.WORKSPACE, value=str(tmp_path / "repo")
    )
    return fleet


def claim_status() -> str:
    return Claim.objects.get(key=CLAIM).status


def test_the_coder_running_on_the_refuted_claim_is_halted_and_releases_nothing(
    worker, client, http, fleet, receiver: Receiver
):
    play(fleet, STORY, range(halted_consumer.VERIFIED + 1), transport=http)
    eventually(lambda: claim_status() == "verified")
    play(fleet, STORY, range(halted_consumer.VERIFIED + 1, halted_consumer.REFUTED + 1), http)
    eventually(lambda: claim_status() == "refuted")

    halted = eventually(lambda: receiver.of_type("task.halted"))
    assert [r.body["data"]["task"] for r in halted] == [halted_consumer.HALTED]
    assert halted[0].signed
    data = halted[0].body["data"]
    assert (data["run"], data["agent"], data["claim"]) == (RUN, "coder-a", CLAIM)
    assert data["reason"].startswith(
        f"{CLAIM} was refuted while {halted_consumer.HALTED} was running on it: "
    )
    [truth] = data["ground_truth"]
    assert truth["payload"]["rows"] == [[c] for c in all_green.REAL_COLUMNS]
    # The checker ran on it to check it: it is not halted.
    assert list(Halt.objects.values_list("task__key", flat=True)) == [halted_consumer.HALTED]

    play(fleet, STORY, range(halted_consumer.REFUTED + 1, len(STORY.steps)), transport=http)
    assert Task.objects.get(key=halted_consumer.HALTED).state == "succeeded"
    eventually(
        lambda: (
            Task.objects.get(key=halted_consumer.HELD)
            .blockers.filter(code=f"claim:{CLAIM}", cleared_at=None)
            .exists()
        )
    )
    body = api(client, fleet, f"/runs/{RUN}")
    tasks = {t["key"]: t for t in body["tasks"]}
    assert tasks[halted_consumer.HELD]["blockers"] == [f"claim:{CLAIM}"]
    [halt] = tasks[halted_consumer.HALTED]["halted"]
    assert (halt["claim"], halt["settled_at"]) == (CLAIM, None)
