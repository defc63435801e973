"""The packet Bulkhead drafted, in a real browser at desktop and phone width: marked as drafted,
each evidence item with its verdict and the facts the re-check read, beside the recorded attempts.

Its screenshots are docs/screenshots/packet-drafted-desktop.png and packet-drafted-phone.png.
"""

import pytest
from django.utils import timezone

from escalations.models import Escalation
from fleet import services
from fleet.stories import all_green, ensure_agents, play, recent, tier_thresholds
from tests.browser.conftest import expect
from tests.escalations.desk import member

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "correct horse battery staple"


@pytest.fixture
def drafted(tmp_path):
    """The tier thresholds story, played as the demo plays it (its follow-ups inline)."""
    fleet = services.fleet_create(name="acme")
    ensure_agents(fleet, tier_thresholds.STORY)
    all_green.build_orders(tmp_path / "orders.sqlite3")
    all_green.build_workspace(tmp_path / "pricing")
    services.source_add(
        fleet=fleet, kind="datasource", name="orders", value=str(tmp_path / "orders.sqlite3")
    )
    services.source_add(
        fleet=fleet, kind="workspace", name="pricing", value=str(tmp_path / "pricing")
    )
    # As the demo plays it: it happened just now, so its minutes read as they would live.
    play(fleet, tier_thresholds.STORY, start=recent(tier_thresholds.STORY, timezone.now()))
    member("alice", fleet)
    return Escalation.objects.get(run__key=tier_thresholds.RUN)


@pytest.mark.parametrize(("width", "name"), [(1280, "desktop"), (390, "phone")])
def test_the_packet_page_shows_the_draft_and_each_evidence_verdict_with_its_facts(
    drafted, screens, width, name
):
    screen = screens()
    page = screen.page
    page.set_viewport_size({"width": width, "height": 900})
    screen.sign_in("alice", PASSWORD)
    page.goto(f"/escalations/{drafted.pk}/")

    expect()(page.get_by_role("heading", level=1)).to_have_text("No question yet")
    expect()(page.locator("#reason")).to_contain_text("Signal rule: attempts 1 and 2")
    heading = page.evaluate("getComputedStyle(document.querySelector('#question')).fontSize")
    assert heading == ("21.6px" if name == "phone" else "28px")  # a phone's heading is smaller
    expect()(page.get_by_text("Drafted by Bulkhead from the attempts.")).to_be_visible()
    gold = page.locator("#evidence-0")
    expect()(gold.get_by_text("verified", exact=True)).to_be_visible()
    expect()(gold.get_by_text("reality matches the payload hash")).to_be_visible()
    expect()(gold.locator("pre.lines")).to_have_text("  gold_threshold: 1000")
    columns = page.locator("#evidence-2")
    expect()(columns.get_by_role("cell", name="loyalty_points")).to_be_visible()
    recorded = page.get_by_role("table", name="Attempts Bulkhead recorded")
    expect()(recorded.get_by_role("row")).to_have_count(3)
    expect()(recorded).to_contain_text("escalate")
    expect()(
        page.get_by_text("It asked planner for the smallest unblocking question")
    ).to_be_visible()
    # The answer form works on a draft: the reviewer answers the question the record raises.
    expect()(page.get_by_role("button", name="Answer and release")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screen.shot(f"packet-drafted-{name}")
    assert not screen.problems, screen.problems
