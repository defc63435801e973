"""What a newcomer hit at the desk, tried again in Chromium as a new reviewer or manager would:
each test failed before its fix."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import TestCase
from django.utils import timezone

from escalations.models import Escalation
from escalations.services import escalation_abort, escalation_answer, escalation_reroute
from fleet import demo, services
from fleet.models import Delivery, DeliveryAttempt, Membership
from fleet.stories import all_green, shared_question
from runs.models import Run
from tests.browser.conftest import expect
from tests.escalations.desk import member

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"


def fits(page, locator, width=390):
    """The element is on screen without scrolling sideways."""
    box = locator.bounding_box()
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width


# Back and Forward after an answer


def test_back_and_forward_after_an_answer_never_show_a_stale_claim_button(
    desk, fleet, screens, settings
):
    settings.DESK_POLL_SECONDS = 3600  # no poll may hide a stale page: what shows is what came
    escalation = desk.escalate()
    member("alice", fleet)
    screen = screens()
    page = screen.page
    screen.sign_in("alice", PASSWORD)
    page.goto("/escalations/")
    response = page.goto("/escalations/")
    assert "no-store" in response.headers["cache-control"]
    expect()(page.get_by_role("button", name=f"Claim escalation {escalation.pk}")).to_be_visible()
    page.get_by_role("link", name=escalation.packet.smallest_unblocking_question).click()
    page.get_by_role("textbox", name="Answer", exact=True).fill("Use the threshold")
    page.get_by_role("button", name="Answer and release").click()
    expect()(page.get_by_role("heading", name=re.compile("Answered by alice"))).to_be_visible()

    page.go_back()
    expect()(page.get_by_role("heading", name="Escalation queue")).to_be_visible()
    expect()(page.get_by_role("button", name=re.compile("Claim escalation"))).to_have_count(0)
    expect()(page.locator("#queue-count")).to_have_text("0 tasks waiting on 0 escalations")
    page.go_forward()
    expect()(page.get_by_role("heading", name=re.compile("Answered by alice"))).to_be_visible()
    expect()(page.get_by_role("button", name="Answer and release")).to_have_count(0)
    expect()(page.get_by_role("button", name="Claim it")).to_have_count(0)


# The desk on a phone


def test_on_a_phone_the_queue_shows_cards_with_claim_age_and_status_on_screen(desk, fleet, screens):
    desk.run("later", [{"key": "docs", "agent": "coder"}])
    desk.escalate()
    desk.escalate("docs", run="later")
    member("alice", fleet)
    screen = screens()
    page = screen.page
    page.set_viewport_size({"width": 390, "height": 844})
    screen.sign_in("alice", PASSWORD)
    page.goto("/escalations/")
    rows = page.locator("#queue tbody tr")
    expect()(rows).to_have_count(2)
    for i in range(2):
        row = rows.nth(i)
        for part in (
            row.get_by_role("button", name=re.compile("^Claim")),
            row.locator("td[data-label=Age]"),
            row.locator("td[data-label=Status] .badge"),
        ):
            expect()(part).to_be_visible()
            assert fits(page, part), part
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screen.shot("newcomer-queue-390")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto("/escalations/")
    expect()(page.locator("#queue thead")).to_be_visible()  # a table again on a desk
    screen.shot("newcomer-queue-1280")


def test_on_a_phone_the_run_graph_is_drawn_readable_with_a_legend(desk, fleet, screens):
    desk.run(
        "wide",
        [
            {"key": "plan", "agent": "planner"},
            *({"key": f"step-{i}", "agent": "coder", "prerequisites": ["plan"]} for i in range(6)),
            {"key": "ship", "agent": "coder-b", "prerequisites": [f"step-{i}" for i in range(6)]},
        ],
    )
    run = Run.objects.get(key="wide")
    member("alice", fleet)
    screen = screens()
    page = screen.page
    screen.sign_in("alice", PASSWORD)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 844})
        page.goto(f"/runs/{run.pk}/")
        graph = page.locator("#graph")
        expect()(graph).to_have_attribute("data-drawn", "8")
        legend = page.get_by_label("How to read the task graph")
        expect()(legend).to_contain_text("dashed red border: blocked")
        expect()(legend).to_contain_text("ready: may start now")
        if width == 390:
            # 11 px labels drawn at 0.9 or more: at least 10 px on the screen.
            assert float(graph.get_attribute("data-zoom")) >= 0.9
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
        screen.shot(f"newcomer-run-graph-{width}")


def run_page_on_a_desk(desk, fleet, screens, key: str, tasks: list[dict]):
    """The run declared with these tasks, its page opened at 1280 px by a member."""
    desk.run(key, tasks)
    member("alice", fleet)
    screen = screens()
    screen.sign_in("alice", PASSWORD)
    screen.page.set_viewport_size({"width": 1280, "height": 900})
    screen.page.goto(f"/runs/{Run.objects.get(key=key).pk}/")
    return screen


def test_a_run_of_many_independent_tasks_is_drawn_readable_on_a_desk(desk, fleet, screens):
    # 55 tasks with no prerequisites stand in one column: shown whole, each box was a few pixels.
    tasks = [{"key": f"task-{i}", "agent": "coder"} for i in range(55)]
    screen = run_page_on_a_desk(desk, fleet, screens, "flat", tasks)
    graph = screen.page.locator("#graph")
    expect()(graph).to_have_attribute("data-drawn", "55")
    assert float(graph.get_attribute("data-zoom")) >= 0.9
    expect()(screen.page.locator("#graph-drag")).to_be_visible()
    screen.shot("newcomer-run-graph-flat-1280")


def test_a_small_run_is_drawn_whole_on_a_desk_without_the_drag_hint(desk, fleet, screens):
    screen = run_page_on_a_desk(
        desk, fleet, screens, "small", [{"key": "plan", "agent": "planner"}]
    )
    expect()(screen.page.locator("#graph")).to_have_attribute("data-drawn", "1")
    expect()(screen.page.locator("#graph-drag")).to_be_hidden()


def test_other_actions_sit_by_the_answer_form_not_below_the_history(desk, fleet, screens):
    escalation = desk.escalate()
    member("alice", fleet)
    screen = screens()
    page = screen.page
    screen.sign_in("alice", PASSWORD)
    page.goto(f"/escalations/{escalation.pk}/")
    answer = page.get_by_role("button", name="Answer and release").bounding_box()
    other = page.get_by_role("heading", name="Other actions").bounding_box()
    history = page.get_by_role("heading", name="History").bounding_box()
    assert other["y"] < history["y"]
    assert 0 < other["y"] - (answer["y"] + answer["height"]) < 200
    page.locator("summary", has_text="Abort the task").click()
    expect()(page.get_by_label("Why abort")).to_be_visible()
    screen.shot("newcomer-other-actions")


# Internal keys and how escalations ended


@pytest.fixture
def loaded(settings, tmp_path, live_server):
    settings.VAR_DIR = tmp_path
    settings.SITE_URL = live_server.url  # the demo's callback is this server, as with make run
    started = timezone.now()
    demo.load()
    for username in ("reviewer", "manager"):
        user = get_user_model().objects.get(username=username)
        user.set_password(PASSWORD)
        user.save()
    return started


def test_people_read_claim_keys_as_the_agent_named_them(loaded, screens):
    reviewer = get_user_model().objects.get(username="reviewer")
    replay = Escalation.objects.get(run__key=all_green.RUN)
    with TestCase.captureOnCommitCallbacks(execute=True):
        escalation_answer(escalation=replay, reviewer=reviewer, text=all_green.ANSWER)
    run = Run.objects.get(key=all_green.RUN)
    assert run.claims.filter(key__contains="@refuted-").exists()  # kept so, internally
    screen = screens()
    page = screen.page
    screen.sign_in("manager", PASSWORD)
    for path in (f"/runs/{run.pk}/", f"/escalations/{replay.pk}/", "/reports/"):
        page.goto(path)
        expect()(page.locator("main")).not_to_contain_text("@refuted-")
    page.goto(f"/runs/{run.pk}/")
    expect()(page.locator("main")).to_contain_text("refuted; a reviewer's answer replaced it")
    screen.shot("newcomer-claim-keys")


def test_rerouted_returned_and_aborted_escalations_read_as_such(desk, fleet, screens, client):
    desk.run("r1", [{"key": "a", "agent": "coder"}])
    desk.run("r2", [{"key": "b", "agent": "coder"}])
    alice = member("alice", fleet)
    rerouted = desk.escalate("a", run="r1")
    aborted = desk.escalate("b", run="r2")
    returned = desk.escalate()
    with TestCase.captureOnCommitCallbacks(execute=True):
        escalation_reroute(escalation=rerouted, reviewer=alice, agent="coder-b", note="theirs")
        escalation_abort(escalation=aborted, reviewer=alice, reason="dropped")
        services_return(returned, alice)
    screen = screens()
    page = screen.page
    screen.sign_in("alice", PASSWORD)
    page.goto("/escalations/?status=all")
    for escalation, says in ((rerouted, "rerouted"), (aborted, "aborted"), (returned, "returned")):
        expect()(page.locator(f"#esc-{escalation.pk} td[data-label=Status]")).to_have_text(says)
    screen.shot("newcomer-outcomes")
    from fleet.models import ApiToken

    _, token = ApiToken.issue(desk.planner.agent)
    for escalation, status, outcome in (
        (rerouted, "closed", "rerouted"),
        (aborted, "closed", "aborted"),
        (returned, "returned", "returned"),
    ):
        body = client.get(
            f"/api/v1/escalations/{escalation.pk}", HTTP_AUTHORIZATION=f"Bearer {token}"
        ).json()
        assert (body["status"], body["outcome"]) == (status, outcome)


def services_return(escalation, reviewer):
    from escalations.services import escalation_return

    escalation_return(escalation=escalation, reviewer=reviewer, field="tried", note="say more")


# Reports that say what to change


def test_the_reports_red_figures_link_to_the_claim_the_boundary_and_the_checklist(loaded, screens):
    screen = screens()
    page = screen.page
    screen.sign_in("manager", PASSWORD)
    page.goto("/reports/")
    red = page.locator("a.badge-refuted").first
    expect()(red).to_be_visible()
    red.click()
    target = page.locator(":target")
    expect()(target).to_contain_text("Monday checklist")
    expect()(target).to_contain_text("→")
    target.get_by_role("link", name=re.compile("^Claim ")).first.click()
    expect()(page.get_by_role("heading", level=1)).to_contain_text("Run ")
    assert re.search(r"#claim-\d+$", page.url)
    expect()(page.locator(":target")).to_be_visible()

    page.goto("/reports/")
    page.get_by_role("link", name="what to change").click()
    late = page.locator("#late-disasters")
    expect()(late).to_contain_text("Monday checklist")
    expect()(late.get_by_role("link", name=re.compile("plan.customer-tier"))).to_be_visible()
    expect()(late).to_contain_text("boundary")
    screen.shot("newcomer-reports")


# Newcomers' words


def test_a_superuser_with_no_fleet_is_told_what_to_do(screens):
    get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    screen = screens()
    page = screen.page
    screen.sign_in("root", PASSWORD)
    for path in ("/", "/runs/", "/reports/", "/escalations/"):
        page.goto(path)
        note = page.get_by_role("note")
        expect()(note).to_contain_text("you are a member of no fleet")
        expect()(note).to_contain_text("manage.py member_add root --fleet FLEET --role reviewer")
        expect()(page.locator("main")).not_to_contain_text("You are a reviewer")
        expect()(page.locator("main")).not_to_contain_text("No runs yet")
    screen.shot("newcomer-no-fleet")


def test_the_set_password_page_speaks_of_the_one_time_password(fleet, screens):
    _, password = services.member_add(
        username="nina", fleet=fleet, role=Membership.Role.REVIEWER, one_time=True
    )
    screen = screens()
    page = screen.page
    screen.sign_in("nina", password)
    expect()(page.get_by_role("heading", name="Set your password")).to_be_visible()
    page.get_by_label("One-time password").fill("not-the-one")
    page.get_by_label("New password", exact=True).fill("a long new passphrase 42")
    page.get_by_label("New password again").fill("a long new passphrase 42")
    page.get_by_role("button", name="Set my password").click()
    error = page.get_by_role("alert")
    expect()(error).to_contain_text("one-time password you were given")
    expect()(page.locator("main")).not_to_contain_text("old password")
    screen.shot("newcomer-set-password")


def test_the_demos_delivery_log_is_in_time_order_with_real_attempt_times(loaded, screens):
    # Nothing was tried at story time: every try was made after the stories were loaded.
    attempts = list(DeliveryAttempt.objects.values_list("at", flat=True))
    assert attempts and min(attempts) >= loaded
    stories = list(Delivery.objects.values_list("created_at", flat=True))
    assert min(stories) < loaded  # the notifications themselves carry the stories' times
    screen = screens()
    page = screen.page
    screen.sign_in("reviewer", PASSWORD)
    page.goto("/deliveries/")
    times = page.locator("section[aria-labelledby=log-title] tbody tr td:first-child time")
    stamps = [times.nth(i).get_attribute("datetime") for i in range(times.count())]
    assert len(stamps) > 5 and stamps == sorted(stamps, reverse=True)
    screen.shot("newcomer-deliveries")


def test_the_demo_resets_without_touching_the_environment(loaded, screens):
    reviewer = get_user_model().objects.get(username="reviewer")
    shared = Escalation.objects.get(run__key=shared_question.RUN)
    assert shared.joined.count() == 1  # the demo's question shared by two tasks
    escalation_answer(escalation=shared, reviewer=reviewer, text="Euros for everyone")
    call_command("demo", "--reset", "--quiet")
    reviewer.set_password(PASSWORD)
    reviewer.save()
    again = Escalation.objects.get(run__key=shared_question.RUN)
    assert again.status == "open" and again.pk != shared.pk
    screen = screens()
    page = screen.page
    screen.sign_in("reviewer", PASSWORD)
    page.goto(f"/escalations/{again.pk}/")
    expect()(page.get_by_role("heading", name="2 tasks wait on this question")).to_be_visible()
    expect()(page.get_by_role("button", name="Answer and release")).to_be_visible()


def test_no_page_or_api_document_cites_the_design_file(loaded, screens):
    screen = screens()
    page = screen.page
    screen.sign_in("manager", PASSWORD)
    run = Run.objects.first()
    escalation = Escalation.objects.first()
    for path in (
        "/",
        "/escalations/",
        f"/escalations/{escalation.pk}/",
        "/runs/",
        f"/runs/{run.pk}/",
        "/capabilities/",
        "/deliveries/",
        "/reports/",
        "/api/v1/docs",
        "/api/v1/openapi.json",
    ):
        page.goto(path)
        assert "DESIGN" not in page.content(), path
