"""Management commands print JSON and refuse bad input with a clear message."""

import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from fleet.models import Agent, ApiToken, Fleet, Membership, VerificationSource, token_digest
from fleet.outbox import notify
from runs.models import Run

pytestmark = pytest.mark.django_db


def run_command(*args: str) -> dict:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return json.loads(out.getvalue())


def test_fleet_create_prints_the_fleet_and_its_callback_secret():
    printed = run_command(
        "fleet_create", "acme", "--callback-url", "https://hooks.example.com/bulkhead"
    )
    assert printed["fleet"] == "acme"
    assert printed["callback_secret"].startswith("whsec_")
    assert Fleet.objects.get(name="acme").callback_url == "https://hooks.example.com/bulkhead"


def disabled_by_a_410(name: str) -> None:
    from django.utils import timezone

    Fleet.objects.filter(name=name).update(
        callback_disabled_at=timezone.now(),
        callback_disabled_reason="the receiver answered 410 Gone to msg_1",
    )


def test_a_new_callback_url_enables_an_endpoint_that_a_410_disabled():
    run_command("fleet_create", "acme", "--callback-url", "https://old.example.com/hook")
    disabled_by_a_410("acme")

    printed = run_command("fleet_create", "acme", "--callback-url", "https://new.example.com/hook")

    fleet = Fleet.objects.get(name="acme")
    assert printed["callback_url"] == "https://new.example.com/hook"
    assert (printed["callback_disabled"], printed["callback_enabled_again"]) == (None, True)
    assert (fleet.callback_disabled_at, fleet.callback_disabled_reason) == (None, "")


def test_the_same_callback_url_given_again_enables_it_and_says_so():
    run_command("fleet_create", "acme", "--callback-url", "https://hooks.example.com/hook")
    disabled_by_a_410("acme")
    printed = run_command("fleet_create", "acme")  # no URL given: still disabled, and it says why
    assert printed["callback_disabled"].startswith("the receiver answered 410 Gone to msg_1 at ")
    assert printed["callback_enabled_again"] is False

    printed = run_command(
        "fleet_create", "acme", "--callback-url", "https://hooks.example.com/hook"
    )

    fleet = Fleet.objects.get(name="acme")
    assert (printed["callback_disabled"], printed["callback_enabled_again"]) == (None, True)
    assert fleet.callback_disabled_at is None
    assert notify(fleet, "task.ready", {"run": "r1", "task": "a"}) is not None


def test_an_empty_callback_url_removes_the_callback():
    run_command("fleet_create", "acme", "--callback-url", "https://hooks.example.com/hook")

    printed = run_command("fleet_create", "acme", "--callback-url", "")

    assert printed["callback_url"] is None
    assert Fleet.objects.get(name="acme").callback_url == ""
    run_command("fleet_create", "acme")  # not given: unchanged
    assert Fleet.objects.get(name="acme").callback_url == ""


def test_fleet_create_sets_whether_unnamed_roles_stop_external_effects():
    assert run_command("fleet_create", "acme")["unnamed_roles_stop"] is False
    assert run_command("fleet_create", "acme", "--unnamed-roles-stop")["unnamed_roles_stop"] is True
    assert Fleet.objects.get(name="acme").unnamed_roles_stop
    run_command("fleet_create", "acme")  # not named: unchanged
    assert Fleet.objects.get(name="acme").unnamed_roles_stop
    run_command("fleet_create", "acme", "--no-unnamed-roles-stop")
    assert not Fleet.objects.get(name="acme").unnamed_roles_stop


def test_fleet_create_refuses_a_bad_name_or_url():
    with pytest.raises(CommandError, match="slug"):
        run_command("fleet_create", "not a slug")
    with pytest.raises(CommandError, match="URL"):
        run_command("fleet_create", "acme", "--callback-url", "ftp://nowhere")


def test_agent_create_prints_id_endpoint_secret_and_a_token_stored_hashed():
    run_command("fleet_create", "acme")
    printed = run_command("agent_create", "acme", "planner", "--role", "planning", "--orchestrator")
    agent = Agent.objects.get(pk=printed["id"])
    assert agent.is_orchestrator and agent.role == "planning"
    assert printed["endpoint"].endswith(f"/hooks/v1/agents/{agent.pk}/events")
    assert printed["signing_secret"].startswith("whsec_")
    assert agent.signing_keys.get().secret == printed["signing_secret"]
    token = ApiToken.objects.get(agent=agent)
    assert token.digest == token_digest(printed["api_token"])
    assert printed["api_token"] not in token.digest


def test_agent_create_refuses_an_unknown_fleet_and_a_duplicate_name():
    with pytest.raises(CommandError, match="no fleet named 'ghost'"):
        run_command("agent_create", "ghost", "planner")
    run_command("fleet_create", "acme")
    run_command("agent_create", "acme", "planner")
    with pytest.raises(CommandError, match="already exists"):
        run_command("agent_create", "acme", "planner")


def test_agent_key_add_rotates_an_agents_signing_key(client):
    from tests.conftest import Sender

    run_command("fleet_create", "acme")
    created = run_command("agent_create", "acme", "planner", "--orchestrator")
    agent = Agent.objects.get(pk=created["id"])
    old_key = agent.signing_keys.get()
    added = run_command("agent_key_add", "acme", "planner")
    assert set(added) >= {"agent", "key_id", "signing_secret"}
    assert added["agent"] == "planner" and added["signing_secret"].startswith("whsec_")
    assert added["signing_secret"] != created["signing_secret"]
    assert added["active_key_ids"] == [old_key.pk, added["key_id"]]

    def post(secret: str, run: str) -> int:
        sender = Sender(client, agent, secret)
        task = {"key": "a", "agent": "planner"}
        return sender.post("run.started", {"run": run, "tasks": [task]}).status_code

    assert post(created["signing_secret"], "r1") == 202  # both keys sign until one is revoked
    assert post(added["signing_secret"], "r2") == 202
    revoked = run_command("agent_key_add", "acme", "planner", "--revoke", str(old_key.pk))
    assert revoked["key_id"] == old_key.pk and revoked["active"] is False
    assert revoked["active_key_ids"] == [added["key_id"]]
    assert "signing_secret" not in revoked
    assert post(created["signing_secret"], "r3") == 401
    assert post(added["signing_secret"], "r4") == 202


def test_agent_key_add_refuses_what_it_cannot_find_or_do():
    with pytest.raises(CommandError, match="no fleet named 'ghost'"):
        run_command("agent_key_add", "ghost", "planner")
    run_command("fleet_create", "acme")
    with pytest.raises(CommandError, match="no agent 'ghost' in fleet 'acme'"):
        run_command("agent_key_add", "acme", "ghost")
    created = run_command("agent_create", "acme", "planner")
    other = run_command("agent_create", "acme", "coder")
    others_key = Agent.objects.get(pk=other["id"]).signing_keys.get().pk
    with pytest.raises(CommandError, match=f"agent 'planner' has no signing key {others_key}"):
        run_command("agent_key_add", "acme", "planner", "--revoke", str(others_key))
    key = Agent.objects.get(pk=created["id"]).signing_keys.get().pk
    run_command("agent_key_add", "acme", "planner", "--revoke", str(key))
    with pytest.raises(CommandError, match="already revoked"):
        run_command("agent_key_add", "acme", "planner", "--revoke", str(key))


def test_member_add_creates_the_user_once_with_a_one_time_password():
    run_command("fleet_create", "acme")
    first = run_command("member_add", "alice", "--fleet", "acme", "--role", "reviewer")
    user = get_user_model().objects.get(username="alice")
    assert user.check_password(first["password"])
    again = run_command("member_add", "alice", "--fleet", "acme", "--role", "manager")
    assert again["password"] is None
    assert Membership.objects.get(user=user).role == "manager"


def test_source_add_registers_a_verification_source(tmp_path):
    run_command("fleet_create", "acme")
    repo = tmp_path / "repo"
    repo.mkdir()
    printed = run_command("source_add", "acme", "workspace", "repo", str(repo))
    assert printed == {"fleet": "acme", "kind": "workspace", "name": "repo", "value": str(repo)}
    assert VerificationSource.objects.get().value == str(repo)


def sqlite_file(path):
    import sqlite3

    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE customers (id INTEGER, loyalty_points INTEGER)")
    connection.close()
    return path


def test_source_add_takes_a_sqlite_url_or_a_path_and_stores_the_path(tmp_path, monkeypatch):
    from runs.claims import verifiers
    from runs.claims.hashing import payload_hash, query_result_payload
    from runs.claims.verification import sources_for

    run_command("fleet_create", "acme")
    database = sqlite_file(tmp_path / "orders.sqlite3")
    by_url = run_command("source_add", "acme", "datasource", "orders", f"sqlite:///{database}")
    assert by_url["value"] == str(database)
    by_path = run_command("source_add", "acme", "datasource", "copy", str(database))
    assert by_path["value"] == str(database)
    monkeypatch.chdir(tmp_path)
    relative = run_command("source_add", "acme", "datasource", "rel", "sqlite:///orders.sqlite3")
    assert relative["value"] == str(database)
    # What is stored is what the verifier opens.
    query = "SELECT name FROM pragma_table_info('customers') ORDER BY cid"
    payload = query_result_payload(columns=["name"], rows=[["id"], ["loyalty_points"]])
    evidence = {
        "kind": "query_result",
        "source": query,
        "datasource": "orders",
        "payload_hash": payload_hash(payload),
    }
    fleet = Fleet.objects.get(name="acme")
    assert verifiers.verify(evidence, sources_for(fleet.pk)).status == "verified"


def test_source_add_takes_a_postgresql_dsn_unchecked():
    run_command("fleet_create", "acme")
    dsn = "postgresql://reader@db.invalid:5432/orders"
    assert run_command("source_add", "acme", "datasource", "orders", dsn)["value"] == dsn


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("datasource", "{tmp}/missing.sqlite3", "no SQLite database file at {tmp}/missing.sqlite3"),
        ("datasource", "sqlite:///{tmp}/missing.sqlite3", "no SQLite database file at"),
        ("datasource", "{tmp}/notes.txt", "{tmp}/notes.txt is not a SQLite database file"),
        ("datasource", "{tmp}", "no SQLite database file at {tmp}"),
        ("datasource", "mysql://db/orders", "not a data source: give a PostgreSQL DSN"),
        ("datasource", "sqlite://", "not a data source"),
        ("workspace", "{tmp}/nowhere", "no directory at {tmp}/nowhere"),
        ("workspace", "{tmp}/notes.txt", "no directory at {tmp}/notes.txt"),
    ],
)
def test_source_add_refuses_a_source_that_is_not_there(tmp_path, kind, value, message):
    import re

    (tmp_path / "notes.txt").write_text("not a database")
    run_command("fleet_create", "acme")
    with pytest.raises(CommandError, match=re.escape(message.format(tmp=tmp_path))):
        run_command("source_add", "acme", kind, "orders", value.format(tmp=tmp_path))
    assert not VerificationSource.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_demo_is_idempotent_and_prints_a_login(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    first = run_command("demo")
    second = run_command("demo")
    assert first["fleet"] == second["fleet"] == "demo"
    assert second["login"]["reviewer"] == first["login"]["reviewer"]
    user = get_user_model().objects.get(username="reviewer")
    assert user.check_password(first["login"]["reviewer"])
    assert Run.objects.filter(fleet__name="demo").count() == len(first["runs"])


@pytest.mark.django_db(transaction=True)
def test_demo_loads_the_stories_as_the_app_computes_them(settings, tmp_path):
    from escalations.models import Escalation
    from fleet.stories import forge_outage, hung_test_run
    from runs.models import Blocker, Task

    settings.VAR_DIR = tmp_path
    printed = run_command("demo")
    assert {
        "tier-discounts",
        "tier-discounts-replay",
        "repository-init",
        "implement-issue-302",
    } <= set(printed["runs"])
    waiting = Escalation.objects.get(run__key="tier-discounts-replay", status="open")
    assert waiting.packet.smallest_unblocking_question.startswith("Where does a customer's tier")
    failed = Run.objects.get(key=hung_test_run.RUN)
    assert failed.state == "failed" and failed.cause.startswith(hung_test_run.CAUSE_PREFIX)
    local = Task.objects.filter(run__key="repository-init", state="succeeded").count()
    assert local == 4
    # The forge is still down in the demo: its four actions wait until a manager marks it up.
    deferred = Blocker.objects.filter(code="capability:forge", cleared_at=None)
    assert sorted(deferred.values_list("task__key", flat=True)) == sorted(forge_outage.FORGE)
    # Where to look says what the app computes there now, not what the stories meant to show.
    said = " | ".join(printed["look_at"])
    assert (
        "the escalation queue (3 waiting; the oldest from invoice-format, assigned to reviewer, due "
        in said
    )
    assert (
        "one question, two tasks (escalation" in said and "2 tasks wait on its one answer" in said
    )
    drafted = Escalation.objects.get(run__key="tier-thresholds", status="open")
    assert drafted.packet.drafted and drafted.packet.smallest_unblocking_question == ""
    assert (
        f"the tier thresholds (escalation {drafted.pk}: a packet Bulkhead drafted from the "
        "attempts)" in said
    )
    assert "the all-green replay (1 agent, 0 artifacts, 2 minutes unchecked)" in said
    assert "the all-green run as it happened (3 agents, 4 artifacts, 40 minutes unchecked)" in said
    assert "the evidence does not mention customers.customer_tier" in said
    assert "the forge outage (4 tasks done, 4 waiting with capability:forge)" in said
    assert "the hung test run (failed: implement session ended with a background task" in said
    Blocker.objects.filter(code="capability:forge").update(cleared_at=failed.finished_at)
    again = " | ".join(run_command("demo")["look_at"])
    assert "the forge outage (4 tasks done, 0 waiting with capability:forge)" in again
    assert "the capabilities (as manager, mark the forge up to release them)" in said
    assert "the capabilities (the forge is back: its tasks were released)" in again


@pytest.mark.django_db(transaction=True)
def test_the_demos_live_stories_happened_just_now(settings, tmp_path):
    """Their events' times and the server's own (checks, decisions) tell one consistent story."""
    from django.utils import timezone

    from escalations.selectors.radius import radii_for
    from runs.models import Claim

    settings.VAR_DIR = tmp_path
    before = timezone.now()
    run_command("demo")

    replay = Run.objects.get(key="tier-discounts-replay")
    assert before - timedelta(minutes=15) < replay.started_at < before
    radius = radii_for(replay)
    assert radius["plan.tier-source"]["minutes"] == 2.0
    assert radius["plan.tier-table"]["minutes"] < 10
    # What Bulkhead did in response is stamped in story order: the reframe came before the
    # planner's second attempt, which it caused.
    from runs.models import Attempt, Decision

    reframe = Decision.objects.get(task__run=replay, action="reframe")
    second = Attempt.objects.get(task__run=replay, task__key="plan", number=2)
    assert reframe.created_at < second.started_at
    hung = Run.objects.get(key="implement-issue-302")
    assert hung.finished_at - hung.started_at < timedelta(minutes=60)
    # The past run keeps its own dates.
    assert Claim.objects.get(key="plan.customer-tier").posted_at.year == 2026
    assert Run.objects.get(key="tier-discounts").started_at.month == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("fleet_create", "f" * 101), "at most 100"),
        (("agent_create", "acme", ""), "must not be empty"),
        (("agent_create", "acme", "bad name!"), "may hold letters"),
        (("agent_create", "acme", "a" * 101), "at most 100"),
        (("agent_create", "acme", "ok", "--role", "r" * 101), "at most 100"),
        (("member_add", "bad user name!", "--fleet", "acme", "--role", "reviewer"), "username"),
        (("member_add", "u" * 151, "--fleet", "acme", "--role", "reviewer"), "at most 150"),
        (("source_add", "acme", "command", "tests", ""), "must not be empty"),
        (("source_add", "acme", "command", "", "pytest"), "must not be empty"),
        (("source_add", "acme", "command", "tests", "pytest 'unclosed"), "cannot be split"),
        (("source_add", "acme", "host", "h", "not a host/../x"), "not a host name"),
        (("source_add", "acme", "host", "h", "https://api.example.com"), "not a host name"),
        (("source_add", "acme", "host", "n" * 101, "api.example.com"), "at most 100"),
    ],
)
def test_commands_refuse_values_that_do_not_fit_and_write_nothing(args, message):
    run_command("fleet_create", "acme")
    before = (Fleet.objects.count(), Agent.objects.count(), VerificationSource.objects.count())
    users = get_user_model().objects.count()
    with pytest.raises(CommandError, match=message):
        run_command(*args)
    after = (Fleet.objects.count(), Agent.objects.count(), VerificationSource.objects.count())
    assert after == before
    assert get_user_model().objects.count() == users


def test_source_add_takes_a_host_with_a_port_or_an_address():
    run_command("fleet_create", "acme")
    for value in ("api.example.com", "127.0.0.1:8080", "[::1]:8443", "localhost"):
        assert run_command("source_add", "acme", "host", value.replace(":", "-"), value)
    assert VerificationSource.objects.filter(kind="host").count() == 4


@pytest.mark.postgres
def test_source_add_refuses_a_superuser_dsn_saying_how_to_make_a_read_only_role():
    from tests.fixtures.orders import admin_dsn

    run_command("fleet_create", "acme")
    with pytest.raises(CommandError) as refused:
        run_command("source_add", "acme", "datasource", "orders", admin_dsn())
    message = str(refused.value)
    assert "superuser" in message
    assert "CREATE ROLE bulkhead_reader LOGIN" in message


@pytest.mark.django_db(transaction=True)
def test_the_demo_shows_an_assigned_escalation_with_its_due_time_and_its_email(
    settings, tmp_path, mailoutbox
):
    from datetime import timedelta

    from escalations.models import Escalation

    settings.VAR_DIR = tmp_path
    settings.MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "OPTIONS": {"file_path": str(tmp_path / "mail")},
        }
    }
    printed = run_command("demo")
    assert printed["emails"] == f"written as files to {tmp_path / 'mail'}/"
    waiting = Escalation.objects.get(run__key="tier-discounts-replay", status="open")
    assert waiting.assignee.get_username() == "reviewer" and waiting.pool.name == "reviewers"
    assert waiting.due_at - waiting.opened_at == timedelta(minutes=120)  # a reasoning failure
    queue = next(k for k in printed["look_at"] if k.startswith("the escalation queue"))
    assert "assigned to reviewer, due " in queue
    mails = "\n".join(p.read_text() for p in (tmp_path / "mail").iterdir())
    assert "To: reviewer@demo.invalid" in mails and "To: escalations@demo.invalid" in mails
    assert "Subject: [Bulkhead] Assigned to you: tier-discounts-replay / plan" in mails
    run_command("demo")  # idempotent: nothing routed twice
    assert waiting.assignments.count() == 1
