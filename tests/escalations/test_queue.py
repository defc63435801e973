"""Sign-in, roles and the escalation queue: oldest first, filters in the URL, keyset pages, claims."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from escalations.models import Escalation
from escalations.selectors import queue
from fleet import services
from tests.conftest import signed_in
from tests.escalations.desk import QUESTION, member

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


@pytest.fixture
def mallory(db):
    """A reviewer of another fleet."""
    return member("mallory", services.fleet_create(name="globex"))


# Sign-in and roles


def test_signing_in_opens_what_is_waiting(alice):
    browser = Client()
    response = browser.post("/login/", {"username": "alice", "password": PASSWORD}, follow=True)
    assert response.redirect_chain[-1][0] == "/"  # the home page, which leads to the queue
    assert "<h1>What is waiting</h1>" in response.content.decode()


def test_a_wrong_password_is_refused_saying_so(alice):
    response = Client().post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert "enter a correct username and password" in response.content.decode()


def test_repeated_failures_are_throttled_even_with_the_right_password(alice, bob):
    browser = Client()
    for _ in range(5):
        browser.post("/login/", {"username": "alice", "password": "nope"})
    response = browser.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 429
    assert response["Retry-After"] == "900"
    assert "Too many failed sign-ins" in response.content.decode()
    # Another person is not locked out by alice's failures.
    other = Client().post("/login/", {"username": "bob", "password": PASSWORD})
    assert other.status_code == 302


def test_behind_the_proxy_an_address_is_throttled_by_the_client_not_the_proxy(alice, bob, settings):
    from escalations.views.sign_in import LOGIN_FAILURES_PER_ADDRESS

    settings.BEHIND_PROXY = True
    attacker = Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.9")
    for n in range(LOGIN_FAILURES_PER_ADDRESS):
        attacker.post("/login/", {"username": f"nobody-{n}", "password": "nope"})
    assert attacker.post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 429
    # Through the same proxy, another client signs in: the proxy's address is not the key.
    other = Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert other.post("/login/", {"username": "bob", "password": PASSWORD}).status_code == 302


def test_the_sign_in_page_sends_someone_already_signed_in_to_the_queue(alice):
    browser = signed_in(alice)
    response = browser.get("/login/")
    assert response.status_code == 302 and response["Location"] == "/escalations/"
    onward = browser.get("/login/?next=/runs/")
    assert onward["Location"] == "/runs/"
    elsewhere = browser.get("/login/?next=https://evil.example/")
    assert elsewhere["Location"] == "/escalations/"


def test_a_missing_page_is_a_styled_page_with_a_way_back(alice):
    response = signed_in(alice).get("/escalations/999999/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "<h1>Nothing here</h1>" in page and "bulkhead.css" in page
    assert '<a href="/escalations/">Back to the queue</a>' in page
    assert "Sign out" in page  # the whole page, navigation and all


def test_a_form_without_its_token_is_refused_on_a_page_that_says_so(desk, alice):
    escalation = desk.escalate()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    response = browser.post(f"/escalations/{escalation.pk}/claim/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "<h1>This form has expired</h1>" in page and "Nothing was changed." in page
    assert "bulkhead.css" in page and '<a href="/escalations/">Back to the queue</a>' in page


def test_pages_need_a_signed_in_person(desk):
    escalation = desk.escalate()
    for path in ("/escalations/", f"/escalations/{escalation.pk}/", f"/runs/{escalation.run_id}/"):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/?next=")


def test_a_reviewer_of_another_fleet_gets_404_for_an_escalation(desk, mallory):
    escalation = desk.escalate()
    browser = signed_in(mallory)
    assert browser.get(f"/escalations/{escalation.pk}/").status_code == 404
    assert browser.get(f"/escalations/{escalation.pk}/status/").status_code == 404
    assert browser.post(f"/escalations/{escalation.pk}/claim/").status_code == 404
    assert browser.post(f"/escalations/{escalation.pk}/answer/", {"text": "x"}).status_code == 404
    assert browser.get(f"/runs/{escalation.run_id}/").status_code == 404
    assert QUESTION not in browser.get("/escalations/").content.decode()
    escalation.refresh_from_db()
    assert escalation.status == "open"


def test_pages_carry_a_strict_csp_and_no_inline_script_or_style(desk, alice):
    escalation = desk.escalate()
    browser = signed_in(alice)
    for path in (
        "/escalations/",
        f"/escalations/{escalation.pk}/",
        f"/runs/{escalation.run_id}/",
        "/runs/",
        "/capabilities/",
    ):
        response = browser.get(path)
        assert response.status_code == 200, path
        csp = response["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp
        page = response.content.decode()
        scripts = re.findall(r"<script\b([^>]*)>", page)
        assert scripts, path
        for attributes in scripts:  # every script is a file, or data that does not run
            assert "src=" in attributes or 'type="application/json"' in attributes, (
                path,
                attributes,
            )
        assert not re.search(r"\sstyle=", page), path
        assert not re.search(r"\son[a-z]+=", page), path
        assert "htmx-2.min.js" in page
        assert '"includeIndicatorStyles":false' in page


def test_htmx_requests_carry_the_csrf_token_from_the_body(desk, alice):
    escalation = desk.escalate()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    page = browser.get("/escalations/").content.decode()
    token = re.search(r'hx-headers=\'\{"X-CSRFToken": "([^"]+)"\}\'', page).group(1)
    refused = browser.post(f"/escalations/{escalation.pk}/claim/", HTTP_HX_REQUEST="true")
    assert refused.status_code == 403
    accepted = browser.post(
        f"/escalations/{escalation.pk}/claim/", HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token
    )
    assert accepted.status_code == 200


# The queue


def test_it_lists_open_escalations_oldest_first_with_their_columns(client, fleet, desk, alice):
    desk.run("second", tasks=[{"key": "late", "agent": "coder"}])
    old = desk.escalate(timestamp="2026-12-02T09:00:00Z")
    new = desk.escalate("late", run="second", smallest_unblocking_question="Which branch?")
    Escalation.objects.filter(pk=old.pk).update(opened_at=timezone.now() - timedelta(hours=2))
    Escalation.objects.filter(pk=new.pk).update(opened_at=timezone.now() - timedelta(minutes=5))
    page = signed_in(alice).get("/escalations/").content.decode()
    for column in ("Question", "Task", "Run", "Agent", "Age", "Status", "Claimed by"):
        assert f'<th scope="col">{column}</th>' in page
    assert page.index(f'id="esc-{old.pk}"') < page.index(f'id="esc-{new.pk}"')
    row = page[page.index(f'id="esc-{old.pk}"') :]
    row = row[: row.index("</tr>")]
    assert QUESTION.replace("'", "&#x27;") in row
    assert "plan" in row and "tier-discounts" in row and "planner" in row and "2h" in row
    newest = signed_in(alice).get("/escalations/?sort=newest").content.decode()
    assert newest.index(f'id="esc-{new.pk}"') < newest.index(f'id="esc-{old.pk}"')


def test_filters_narrow_the_queue_and_stay_in_the_url(client, fleet, desk, alice):
    desk.run("second", tasks=[{"key": "push", "agent": "coder", "capabilities": ["forge"]}])
    planning = desk.escalate()
    pushing = desk.escalate("push", run="second", smallest_unblocking_question="Which remote?")
    browser = signed_in(alice)

    def ids(path):
        return [int(i) for i in re.findall(r'id="esc-(\d+)"', browser.get(path).content.decode())]

    assert ids("/escalations/") == [planning.pk, pushing.pk]
    assert ids("/escalations/?agent=coder") == [pushing.pk]
    assert ids("/escalations/?capability=forge") == [pushing.pk]
    assert ids("/escalations/?fleet=acme") == [planning.pk, pushing.pk]
    assert ids("/escalations/?fleet=globex") == []
    assert ids("/escalations/?status=answered") == []
    page = browser.get("/escalations/?agent=coder").content.decode()
    assert "<option selected>coder</option>" in page
    assert 'hx-get="/escalations/?agent=coder"' in page  # the poll keeps the filter


def test_the_agent_filter_finds_an_escalation_a_task_of_that_agent_joined(desk, alice):
    desk.run("second", tasks=[{"key": "push", "agent": "coder"}])
    shared = desk.escalate()  # planner's, asking QUESTION
    joined = desk.escalate("push", run="second", smallest_unblocking_question=QUESTION)
    assert joined.pk == shared.pk
    page = signed_in(alice).get("/escalations/?agent=coder").content.decode()
    assert re.findall(r'id="esc-(\d+)"', page) == [str(shared.pk)]


def test_unknown_filter_values_fall_back_to_the_defaults(desk, alice):
    escalation = desk.escalate()
    page = signed_in(alice).get("/escalations/?status=bogus&sort=sideways&after=garbage")
    assert page.status_code == 200
    assert f'id="esc-{escalation.pk}"' in page.content.decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "0001-01-01T00:00:00%2B23:59_1",  # before the year 1 once in UTC
        "9999-12-31T23:59:59.999999-23:59_1",  # past the year 9999
        "2026-12-02T10:00:00%2B16:00_99999999999999999999",  # a key no table holds
    ],
)
def test_a_cursor_the_database_could_not_read_is_the_first_page(desk, alice, cursor):
    escalation = desk.escalate()
    for place in ("after", "before"):
        page = signed_in(alice).get(f"/escalations/?{place}={cursor}")
        assert page.status_code == 200
        assert f'id="esc-{escalation.pk}"' in page.content.decode()


def test_a_cursor_with_any_offset_reads_as_its_instant(desk, alice):
    escalation = desk.escalate()
    later = (escalation.opened_at + timedelta(hours=1)).astimezone(
        timezone.get_fixed_timezone(16 * 60)
    )
    page = signed_in(alice).get(
        "/escalations/", {"sort": "newest", "after": f"{later.isoformat()}_{escalation.pk + 1}"}
    )
    assert page.status_code == 200
    assert f'id="esc-{escalation.pk}"' in page.content.decode()  # older than the cursor


@pytest.mark.parametrize("query", ["agent=%00", "fleet=%00", "capability=%00", "a%00=1"])
def test_a_nul_byte_in_the_address_is_a_400_saying_so(desk, alice, query):
    desk.escalate()
    browser = signed_in(alice)
    page = browser.get(f"/escalations/?{query}")
    assert page.status_code == 400
    assert "holds a NUL byte" in page.content.decode()
    htmx = browser.get(f"/escalations/?{query}", HTTP_HX_REQUEST="true")
    assert htmx.status_code == 400 and "NUL byte" in htmx["HX-Trigger"]


def bulk_escalations(desk, count):
    """`count` open escalations of one run, a minute apart, oldest first."""
    from escalations.models import FailurePacket
    from runs.models import Run, Task

    run = Run.objects.get(key="tier-discounts")
    start = timezone.now() - timedelta(days=1)
    tasks = Task.objects.bulk_create(
        [
            Task(
                run=run, key=f"t{i:03}", agent=desk.coder.agent, position=100 + i, created_at=start
            )
            for i in range(count)
        ]
    )
    tasks = list(Task.objects.filter(run=run, key__startswith="t").order_by("key"))
    made = []
    for i, task in enumerate(tasks):
        packet = FailurePacket.objects.create(
            task=task,
            agent=desk.coder.agent,
            content={"smallest_unblocking_question": f"Question {i:03}?"},
            smallest_unblocking_question=f"Question {i:03}?",
            submitted_at=start,
        )
        made.append(
            Escalation(
                fleet=desk.fleet,
                run=run,
                task=task,
                packet=packet,
                opened_at=start + timedelta(minutes=i),
            )
        )
    Escalation.objects.bulk_create(made)
    return list(Escalation.objects.filter(run=run).order_by("opened_at", "id"))


def page_ids(browser, path, **headers):
    page = browser.get(path, **headers).content.decode()
    links = dict(re.findall(r'<a href="([^"]+)"[^>]*>(Next|Previous|First) page</a>', page))
    found = [int(i) for i in re.findall(r'id="esc-(\d+)"', page)]
    return found, {label: href.replace("&amp;", "&") for href, label in links.items()}


def test_pages_follow_the_keyset_forwards_and_back(desk, alice, monkeypatch):
    monkeypatch.setattr(queue, "PAGE_SIZE", 5)
    rows = [e.pk for e in bulk_escalations(desk, 12)]
    browser = signed_in(alice)
    first, links = page_ids(browser, "/escalations/?agent=coder")
    assert first == rows[:5] and "Previous" not in links
    second, links = page_ids(browser, links["Next"])
    assert second == rows[5:10]
    assert "agent=coder" in links["Next"]  # the filter travels with the place
    third, last_links = page_ids(browser, links["Next"])
    assert third == rows[10:] and "Next" not in last_links
    back, _ = page_ids(browser, last_links["Previous"])
    assert back == rows[5:10]
    newest, _ = page_ids(browser, "/escalations/?sort=newest")
    assert newest == rows[::-1][:5]


@pytest.mark.postgres
@pytest.mark.parametrize("sort", ["oldest", "newest"])
@pytest.mark.parametrize(
    ("status", "index"), [("waiting", "escalation_waiting_order"), ("all", "escalation_order")]
)
def test_a_page_is_read_in_the_order_of_an_index_not_sorted(desk, sort, status, index):
    """With sorting priced out of the plan, no page of the waiting queue, nor of every
    escalation whatever its status, needs one."""
    rows = bulk_escalations(desk, 12)
    middle = queue.Cursor(rows[5].opened_at, rows[5].pk)
    for place in ({}, {"after": middle}, {"before": middle}):
        query = queue.QueueQuery(sort=sort, agent="coder", status=status, **place)
        with CaptureQueriesContext(connection) as seen:
            queue.escalation_queue(fleet_ids=[desk.fleet.pk], query=query, now=timezone.now())
        [statement] = [q["sql"] for q in seen.captured_queries if "ORDER BY" in q["sql"]]
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute("SET LOCAL enable_incremental_sort = off")
            cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}")
            plan = cursor.fetchone()[0][0]["Plan"]
        nodes = list(walk(plan))
        assert not [n for n in nodes if "Sort" in n["Node Type"]], (place, plan)
        [scan] = [n for n in nodes if n.get("Index Name") == index]
        if place:  # a later page starts the scan at its cursor, not at the first row
            assert "opened_at" in scan.get("Index Cond", ""), scan


def walk(node):
    yield node
    for below in node.get("Plans", ()):
        yield from walk(below)


def test_polling_keeps_the_reviewers_place_when_escalations_come_and_go(
    desk, alice, bob, monkeypatch
):
    monkeypatch.setattr(queue, "PAGE_SIZE", 5)
    rows = bulk_escalations(desk, 12)
    browser = signed_in(alice)
    _, links = page_ids(browser, "/escalations/")
    place = links["Next"]
    # While alice reads page two, an older one is answered and a new one arrives.
    Escalation.objects.filter(pk=rows[0].pk).update(status="answered")
    desk.escalate()
    polled, _ = page_ids(browser, place, HTTP_HX_REQUEST="true")
    assert polled == [e.pk for e in rows[5:10]]
    response = browser.get(place, HTTP_HX_REQUEST="true")
    assert response.content.decode().lstrip().startswith('<div id="queue"')  # the partial only


def test_the_queue_reads_the_persons_memberships_once(desk, alice, fleet):
    carol = member("carol", fleet, role="manager")
    for person, manages in ((alice, False), (carol, True)):
        with CaptureQueriesContext(connection) as seen:
            page = signed_in(person).get("/escalations/").content.decode()
        assert ('href="/reports/"' in page) is manages
        assert len([q for q in seen if "fleet_membership" in q["sql"]]) == 1


def test_the_count_says_how_many_wait(desk, alice):
    desk.escalate()
    assert (
        "1 task waiting on 1 escalation" in signed_in(alice).get("/escalations/").content.decode()
    )
    desk.run("again", [{"key": "plan", "agent": "planner"}])
    desk.escalate(run="again", smallest_unblocking_question=QUESTION)  # the same question: it joins
    page = signed_in(alice).get("/escalations/").content.decode()
    assert "2 tasks waiting on 1 escalation" in page
    assert "+1 task</span>" in page


# Claims


def test_a_reviewer_claims_an_escalation_and_the_row_says_so(desk, alice):
    escalation = desk.escalate()
    response = signed_in(alice).post(f"/escalations/{escalation.pk}/claim/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    row = response.content.decode()
    assert row.lstrip().startswith(f'<tr id="esc-{escalation.pk}"')
    assert "alice" in row and "Release" in row
    escalation.refresh_from_db()
    assert escalation.status == "claimed" and escalation.claimed_by.username == "alice"
    assert escalation.claim_expires_at > timezone.now() + timedelta(minutes=14)
    assert escalation.first_looked_at is not None


def test_a_claim_held_by_someone_else_is_refused_naming_them(desk, alice, bob):
    escalation = desk.escalate()
    signed_in(alice).post(f"/escalations/{escalation.pk}/claim/")
    response = signed_in(bob).post(f"/escalations/{escalation.pk}/claim/", HTTP_HX_REQUEST="true")
    assert response.status_code == 409
    assert "Claimed by alice until" in response.content.decode()
    plain = signed_in(bob).post(f"/escalations/{escalation.pk}/claim/")
    assert plain.status_code == 409 and "Claimed by alice until" in plain.content.decode()
    released = signed_in(bob).post(f"/escalations/{escalation.pk}/release/")
    assert released.status_code == 409
    escalation.refresh_from_db()
    assert escalation.claimed_by.username == "alice"


def test_the_holder_releases_a_claim(desk, alice):
    escalation = desk.escalate()
    browser = signed_in(alice)
    browser.post(f"/escalations/{escalation.pk}/claim/")
    response = browser.post(
        f"/escalations/{escalation.pk}/release/", {"next": "/escalations/?agent=planner"}
    )
    assert response.status_code == 302 and response["Location"] == "/escalations/?agent=planner"
    escalation.refresh_from_db()
    assert (escalation.status, escalation.claimed_by) == ("open", None)


def test_a_claim_expires_and_the_escalation_is_open_again(desk, alice, bob):
    escalation = desk.escalate()
    signed_in(alice).post(f"/escalations/{escalation.pk}/claim/")
    Escalation.objects.filter(pk=escalation.pk).update(
        claim_expires_at=timezone.now() - timedelta(seconds=1)
    )
    page = signed_in(bob).get("/escalations/?status=open").content.decode()
    row = page[page.index(f'id="esc-{escalation.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "alice" not in row and ">open<" in row
    assert signed_in(bob).post(f"/escalations/{escalation.pk}/claim/").status_code == 302
    escalation.refresh_from_db()
    assert escalation.claimed_by.username == "bob"


def test_claiming_an_answered_escalation_says_who_answered(desk, alice, bob):
    escalation = desk.escalate()
    signed_in(alice).post(f"/escalations/{escalation.pk}/answer/", {"text": "loyalty points"})
    response = signed_in(bob).post(f"/escalations/{escalation.pk}/claim/", HTTP_HX_REQUEST="true")
    assert response.status_code == 409
    assert "Answered by alice at" in response.content.decode()


def test_a_poll_after_the_session_ends_sends_the_whole_page_to_sign_in(db):
    response = Client().get(
        "/escalations/?agent=coder",
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/escalations/?agent=coder",
    )
    assert response.status_code == 204
    assert response["HX-Redirect"] == "/login/?next=%2Fescalations%2F%3Fagent%3Dcoder"


def test_an_unknown_filter_value_is_shown_as_the_filter_that_empties_the_queue(desk, alice):
    """A stale or mistyped link: the empty queue says which filter found nothing."""
    desk.escalate()
    page = signed_in(alice).get("/escalations/?agent=zzz&capability=warp").content.decode()

    assert "Nothing is waiting with these filters" in page
    assert '<option value="zzz" selected>zzz (no such agent in your fleets)</option>' in page
    assert '<option value="warp" selected>warp (no such capability in your fleets)</option>' in page
    known = signed_in(alice).get("/escalations/?agent=coder").content.decode()
    assert "no such agent" not in known and "<option selected>coder</option>" in known


@pytest.mark.postgres
def test_a_managers_pools_are_read_from_the_index_of_the_managers_tier(desk):
    """ "My pools" for a manager: the escalations waiting at the managers' tier come from their
    own index, not from filtering every waiting escalation (sequential scans priced out)."""
    manager = member("dana", desk.fleet, role="manager")
    rows = bulk_escalations(desk, 12)
    Escalation.objects.filter(pk=rows[3].pk).update(tier=2, last_tier=2)
    query = queue.QueueQuery(assigned="pools")
    with CaptureQueriesContext(connection) as seen:
        page = queue.escalation_queue(
            fleet_ids=[desk.fleet.pk], query=query, now=timezone.now(), user_id=manager.pk
        )
    assert [row["id"] for row in page.rows] == [rows[3].pk]
    [statement] = [q["sql"] for q in seen.captured_queries if "ORDER BY" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}")
        plan = cursor.fetchone()[0][0]["Plan"]
    assert "escalation_managers_tier" in {n.get("Index Name") for n in walk(plan)}, plan


@pytest.mark.postgres
def test_a_page_looks_its_rows_up_without_joining_nor_reading_other_tasks(desk):
    """The rows name one table (what each shows of its task, run, fleet, packet and people is
    looked up by key: nine tables joined took longer to plan than to run), and the agent's
    filter asks each escalation's own task instead of reading every task to count them."""
    from runs.models import Run, Task
    from tests.plans import rows_read

    rows = bulk_escalations(desk, 12)
    run = Run.objects.get(key="tier-discounts")
    Task.objects.bulk_create(
        Task(run=run, key=f"other{n}", agent=desk.coder.agent, position=1000 + n,
             created_at=timezone.now())
        for n in range(3_000)
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_task")
    query = queue.QueueQuery(agent="coder")
    with CaptureQueriesContext(connection) as seen:
        page = queue.escalation_queue(fleet_ids=[desk.fleet.pk], query=query, now=timezone.now())

    assert [row["id"] for row in page.rows] == [e.pk for e in rows]
    assert page.rows[0]["task__agent__name"] == "coder" and page.rows[0]["fleet__name"]
    [listed] = [q["sql"] for q in seen.captured_queries if "ORDER BY" in q["sql"]]
    assert 'FROM "escalations_escalation" WHERE' in listed, listed  # nothing joined to it
    [counted] = [q["sql"] for q in seen.captured_queries
                 if q["sql"].startswith('SELECT COUNT(*) FROM (SELECT "escalations_escalation"')]  # fmt: skip
    assert rows_read(counted) <= 100, counted
