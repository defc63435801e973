"""The desk on a phone (390 px wide): the header wraps and stays on its dark bar, and long
unbroken text wraps instead of widening the page; a wide table scrolls inside its own box."""

import pytest

from runs.models import Run
from tests.browser.conftest import expect
from tests.escalations.desk import member

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
UNBROKEN = "x" * 499 + "?"  # the longest question a packet may ask, without a space


def page_width(page):
    return page.evaluate("document.documentElement.scrollWidth")


def fits_its_box(table) -> bool:
    """The table needs no sideways scroll inside its box."""
    return table.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth + 1")


def on_a_phone(screens, username):
    """A browser 390 px wide, signed in as `username`: its screen and its page."""
    screen = screens()
    screen.page.set_viewport_size({"width": 390, "height": 844})
    screen.sign_in(username, PASSWORD)
    return screen, screen.page


def test_every_page_fits_a_phone_and_the_header_stays_on_its_bar(desk, fleet, screens):
    escalation = desk.escalate(smallest_unblocking_question=UNBROKEN)
    run = Run.objects.get(key="tier-discounts")
    member("carol", fleet, role="manager")
    member("alice", fleet)
    for username in ("alice", "carol"):
        screen, page = on_a_phone(screens, username)
        for path, name in (
            ("/escalations/", "queue"),
            (f"/escalations/{escalation.pk}/", "packet"),
            (f"/runs/{run.pk}/", "run"),
            ("/runs/", "runs"),
            ("/capabilities/", "capabilities"),
            ("/nowhere/", "not-found"),
        ):
            page.goto(path)
            expect()(page.get_by_role("button", name="Sign out")).to_be_visible()
            assert page_width(page) <= 390, (username, path, page_width(page))
            bar = page.locator("header.top").bounding_box()
            for item in (
                page.get_by_role("navigation", name="Main").get_by_role("link").last,
                page.get_by_text(username, exact=True),
                page.get_by_role("button", name="Sign out"),
            ):
                box = item.bounding_box()
                assert box["y"] + box["height"] <= bar["y"] + bar["height"], (path, item)
                assert box["x"] + box["width"] <= 390, (path, item)
            screen.shot(f"mobile-{username}-{name}")
        if username == "carol":  # the manager's extra link wraps onto the bar too
            expect()(page.get_by_role("link", name="Reports")).to_be_visible()
        assert screen.problems == [] or all("404" in p for p in screen.problems), screen.problems


def test_a_long_unbroken_question_wraps_in_the_queue_and_the_packet(desk, fleet, screens):
    escalation = desk.escalate(smallest_unblocking_question=UNBROKEN)
    member("alice", fleet)
    screen = screens()
    page = screen.page
    screen.sign_in("alice", PASSWORD)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 844})
        page.goto("/escalations/")
        link = page.get_by_role("link", name=UNBROKEN)
        expect()(link).to_be_visible()
        assert page_width(page) <= width
        assert link.bounding_box()["width"] < width
        page.goto(f"/escalations/{escalation.pk}/")
        heading = page.get_by_role("heading", level=1)
        expect()(heading).to_have_text(UNBROKEN)
        assert heading.bounding_box()["width"] <= width
        assert page_width(page) <= width


def test_on_a_phone_each_task_of_a_run_is_a_card_whose_blockers_read_whole(desk, fleet, screens):
    run = Run.objects.get(key="tier-discounts")
    member("alice", fleet)
    screen, page = on_a_phone(screens, "alice")
    page.goto(f"/runs/{run.pk}/")
    table = page.locator("table.tasks")
    # No row is wider than its box: the table does not scroll sideways inside its section.
    assert table.evaluate("t => t.scrollWidth <= t.parentElement.clientWidth"), "scrolls sideways"
    blocker = table.locator("td[data-label=Blockers] code.blocker").first
    expect()(blocker).to_have_text("prerequisite:plan")
    # The blocker has the width of a card's value, not of a squeezed column.
    assert blocker.bounding_box()["width"] > 120
    screen.shot("mobile-run-task-cards")


def test_on_a_phone_the_queues_hint_sits_under_its_heading(desk, fleet, screens):
    desk.escalate()
    member("alice", fleet)
    screen, page = on_a_phone(screens, "alice")
    page.goto("/escalations/")
    heading = page.get_by_role("heading", level=1).bounding_box()
    hint = page.locator(".page-head .hint").bounding_box()
    gap = hint["y"] - (heading["y"] + heading["height"])
    assert 0 <= gap <= 16, gap  # wrapped under it, not a screen's tenth further down


def test_on_a_phone_the_reports_tables_stack_and_a_box_that_would_scroll_shows_a_shadow(
    desk, fleet, screens
):
    """The reports' tables stack into labelled rows on a phone, so none scrolls sideways out of
    sight; a section that still had to scroll carries the edge shadows on its background (and the
    covers that hide them at an end)."""
    desk.escalate()
    member("carol", fleet, role="manager")
    screen, page = on_a_phone(screens, "carol")
    page.goto("/reports/")
    boxes = page.evaluate(
        """() => [...document.querySelectorAll('section, main > table')].map(e => [
            e.scrollWidth > e.clientWidth + 1,
            getComputedStyle(e).backgroundImage,
            getComputedStyle(e).backgroundAttachment,
        ])"""
    )
    assert boxes
    assert not [b for b in boxes if b[0]], "a reports table scrolls sideways on a phone"
    for _, image, attachment in boxes:
        assert image.count("radial-gradient") == 2 and image.count("linear-gradient") == 2, image
        assert attachment.startswith("local, local, scroll, scroll"), attachment
    assert page.locator("caption").first.evaluate("c => getComputedStyle(c).textAlign") == "left"
    screen.shot("mobile-reports-scroll-shadow")


def test_on_a_phone_a_capability_is_a_card_with_its_button_in_sight(desk, fleet, screens):
    """The board's seven columns scrolled sideways with no cue, 'Mark forge up' at x≈542 of a
    390 px screen; each capability is a card, its facts labelled, its button in reach."""
    from fleet.models import Capability

    Capability.objects.update_or_create(
        fleet=fleet, name="forge", defaults={"status": "down", "reason": "GitHub is down"}
    )
    member("carol", fleet, role="manager")
    screen, page = on_a_phone(screens, "carol")
    page.goto("/capabilities/")
    button = page.get_by_role("button", name="Mark forge up")
    expect()(button).to_be_visible()
    box = button.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    assert fits_its_box(page.locator("table.capabilities"))
    expect()(page.locator("td[data-label='Reason']").first).to_contain_text("GitHub is down")
    screen.shot("mobile-capabilities-card")
    assert not screen.problems, screen.problems


def test_on_a_phone_each_email_or_chat_message_is_a_card(desk, fleet, screens):
    """The messages' table wrapped addresses a few letters a line and hid Status and Tries
    behind a sideways scroll; each message is a card, every fact in sight."""
    from django.utils import timezone

    from escalations.models import Message

    escalation = desk.escalate()
    target = "escalations-for-the-pricing-team" + "x" * 40 + "@example.com"
    Message.objects.create(
        escalation=escalation, kind="email", target=target, reason="opened", subject="s",
        body="b", next_attempt_at=timezone.now(), created_at=timezone.now(), status="sent",
        attempts=1,
    )  # fmt: skip
    member("carol", fleet, role="manager")
    screen, page = on_a_phone(screens, "carol")
    page.goto("/deliveries/")
    table = page.locator("table.messages")
    assert fits_its_box(table)
    for label in ("Status", "Tries"):
        cell = table.locator(f"td[data-label='{label}']").first
        expect()(cell).to_be_visible()
        box = cell.bounding_box()
        assert box["x"] + box["width"] <= 390, (label, box)
    assert page_width(page) <= 390
    screen.shot("mobile-deliveries-messages")
    assert not screen.problems, screen.problems
