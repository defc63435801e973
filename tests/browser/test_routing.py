"""The queue's "mine", "my pools" and "unassigned" filters and a hand-off, in a real browser:
elements found by role and accessible name, screenshots at 1280 and 390 pixels."""

import pytest

from tests.browser.conftest import expect
from tests.escalations.desk import member
from tests.escalations.routed import due, pool, route

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"


def test_queue_filters_and_a_hand_off(desk, alice, screens):
    member("bob", desk.fleet)
    pool(desk.fleet, "planners", "alice", "bob")
    route(desk.fleet, "planners", agent_role="planning")
    due(desk.fleet, 90)
    mine = desk.escalate()  # alice's turn
    desk.run("two")
    bobs = desk.escalate(run="two")  # bob's turn
    desk.run("three", tasks=[{"key": "docs", "agent": "coder"}])
    nobodys = desk.escalate("docs", run="three")  # no rule for the coders
    screen = screens()
    page = screen.page
    screen.sign_in("alice", PASSWORD)
    rows = page.locator("tbody tr")

    def show(label: str) -> None:
        page.get_by_label("Assigned").select_option(label=label)
        page.get_by_role("button", name="Apply filters").click()

    show("Mine")
    expect()(rows).to_have_count(1)
    expect()(page.locator(f"#esc-{mine.pk}")).to_contain_text("alice")
    expect()(page.locator(f"#esc-{mine.pk}")).to_contain_text("due")
    show("My pools")
    expect()(rows).to_have_count(2)
    expect()(page.locator(f"#esc-{bobs.pk}")).to_be_visible()
    show("Unassigned")
    expect()(rows).to_have_count(1)
    expect()(page.locator(f"#esc-{nobodys.pk}")).to_contain_text("unassigned")
    assert "assigned=unassigned" in page.url
    screen.shot("h15a-queue-unassigned-desktop")

    show("Mine")
    page.locator(f"#esc-{mine.pk}").get_by_role("link").first.click()
    expect()(page.get_by_role("heading", name="Assigned to alice")).to_be_visible()
    page.locator("summary").filter(has_text="Hand it off").click()
    page.get_by_label("Hand it to").select_option("bob")
    page.get_by_label("Note (kept in the history)").fill("Bob wrote the pricing config")
    page.get_by_role("button", name="Hand off").click()
    expect()(page.get_by_role("heading", name="Assigned to bob")).to_be_visible()
    history = page.get_by_role("region", name="History")
    expect()(history).to_contain_text("handed off to bob by alice")
    expect()(history).to_contain_text("Bob wrote the pricing config")
    screen.shot("h15a-packet-handed-off-desktop")

    page.goto("/escalations/?assigned=mine")
    expect()(page.get_by_text("Nothing is waiting with these filters.")).to_be_visible()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/escalations/?assigned=pools")
    expect()(rows).to_have_count(2)
    screen.shot("h15a-queue-pools-phone")
    page.goto(f"/escalations/{mine.pk}/")
    expect()(page.get_by_role("heading", name="Assigned to bob")).to_be_visible()
    screen.shot("h15a-packet-assignment-phone")
    assert screen.problems == []
