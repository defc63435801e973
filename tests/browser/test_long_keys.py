"""Keys of 200 characters without a space (the longest a run or task key may be), in a real
browser at desktop and phone width: the queue and the runs list break them in their cells,
so one long key neither pushes every row's buttons out of sight nor widens the page."""

import pytest

from tests.escalations.desk import Desk, member

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "correct horse battery staple"
RUN = "r" * 200
TASK = "t" * 200


@pytest.mark.parametrize(("width", "name"), [(1280, "desktop"), (390, "phone")])
def test_a_long_run_and_task_key_keep_the_queue_and_runs_list_within_the_page(
    client, fleet, screens, width, name
):
    desk = Desk(client, fleet)
    desk.run()
    desk.escalate()  # a row with short keys, whose button must stay in sight
    desk.run(RUN, tasks=[{"key": TASK, "agent": "coder"}])
    desk.escalate(TASK, run=RUN, smallest_unblocking_question="Which tier table is the real one?")
    member("alice", fleet)
    screen = screens()
    page = screen.page
    page.set_viewport_size({"width": width, "height": 900})
    screen.sign_in("alice", PASSWORD)

    page.goto("/escalations/")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    box = page.locator(".queue").first
    assert box.evaluate("b => b.scrollWidth <= b.clientWidth")  # no sideways scroll inside
    for button in page.get_by_role("button", name="Claim").all():
        right = button.evaluate("b => b.getBoundingClientRect().right")
        assert right <= width, right
    screen.shot(f"queue-long-keys-{name}")

    page.goto("/runs/")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screen.shot(f"runs-long-keys-{name}")
    assert not screen.problems, screen.problems
