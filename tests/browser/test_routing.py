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


def test_a_reviewer_marks_themself_away_and_a_manager_adds_the_fleets_chat(desk, alice, screens):
    from escalations.models import Channel

    member("manny", desk.fleet, role="manager")
    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners")
    due(desk.fleet, 60, urgency="high")
    screen = screens()
    page = screen.page
    screen.sign_in("alice", PASSWORD)
    page.get_by_role("link", name="Notifications").click()
    page.get_by_role("button", name="Mark me away").click()
    expect()(page.get_by_role("heading", name="You are away")).to_be_visible()
    page.get_by_label("Kind").select_option("chat")
    page.get_by_label("Address or URL").fill("not a url")
    page.get_by_role("button", name="Add channel").click()
    expect()(page.get_by_role("alert")).to_contain_text("is not a chat URL Apprise knows")
    screen.shot("h15a-notifications-refused-desktop")

    manager = screens()
    manager.sign_in("manny", PASSWORD)
    manager.page.goto("/notifications/")
    fleet_section = manager.page.get_by_role("region", name="Fleet acme (you manage it)")
    fleet_section.get_by_label("Kind").select_option("chat")
    fleet_section.get_by_label("Address or URL").fill("slack://T1/B2/s3cr3t/#escalations")
    fleet_section.get_by_role("button", name="Add channel to acme").click()
    expect()(fleet_section).to_contain_text("slack://")
    expect()(fleet_section).not_to_contain_text("s3cr3t")
    assert Channel.objects.get(fleet=desk.fleet).target == "slack://T1/B2/s3cr3t/#escalations"
    manager.shot("h15a-notifications-manager-desktop")
    manager.page.set_viewport_size({"width": 390, "height": 844})
    manager.shot("h15a-notifications-manager-phone")
    assert screen.problems == [] and manager.problems == []
