"""The demo fleet: the seeds' stories played through the signed intake (idempotent)."""

import io
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from escalations.models import Answer, Escalation, FailurePacket, JoinedTask, RoutingRule
from escalations.selectors.radius import radii_for
from escalations.services import messages, routing
from fleet import outbox, services
from fleet.broker import after_commit
from fleet.celery import app as celery_app
from fleet.models import Delivery, Event, Fleet, Membership
from fleet.stories import (
    Story,
    all_green,
    ensure_agents,
    forge_outage,
    halted_consumer,
    hung_test_run,
    play,
    recent,
    shared_question,
    tier_thresholds,
)
from fleet.tasks import deliver
from runs.models import Blocker, Claim, Halt, Run

FLEET = "demo"
# The forge stays down in the demo, so that its deferred work can be seen and released by hand
# (a manager marks it up on the capabilities board); the acceptance test plays the whole story.
DEMO_STEPS = {forge_outage.STORY.name: range(forge_outage.FORGE_BACK)}
STORIES: tuple[tuple[Story, str], ...] = (
    (all_green.STORY, all_green.RUN),
    (forge_outage.STORY, forge_outage.RUN),
    (hung_test_run.STORY, hung_test_run.RUN),
    (halted_consumer.STORY, halted_consumer.RUN),
    (tier_thresholds.STORY, tier_thresholds.RUN),
    (shared_question.STORY, shared_question.RUN),
)


def fleet_and_people() -> Fleet:
    # Its notifications go to the app's own demo callback, so that run.failed and the rest are
    # really signed and delivered (the worker sends them once the web server is up).
    callback = settings.SITE_URL.rstrip("/") + reverse("demo-callback", args=[FLEET])
    fleet = services.fleet_create(name=FLEET, callback_url=callback)
    for story, _ in STORIES:
        ensure_agents(fleet, story)
    all_green.ensure_imported_agents(fleet)
    for username, role in (
        ("reviewer", Membership.Role.REVIEWER),
        ("manager", Membership.Role.MANAGER),
    ):
        services.member_add(username=username, fleet=fleet, role=role)
    demo_dir = settings.VAR_DIR / "demo"
    all_green.build_orders(demo_dir / "orders.sqlite3")
    all_green.build_workspace(demo_dir / "pricing")
    services.source_add(
        fleet=fleet, kind="datasource", name="orders", value=str(demo_dir / "orders.sqlite3")
    )
    services.source_add(
        fleet=fleet, kind="workspace", name="pricing", value=str(demo_dir / "pricing")
    )
    reaching_reviewers(fleet)
    halted_consumer.build_repository(demo_dir / "orders-repo")
    services.source_add(
        fleet=fleet,
        kind="workspace",
        name=halted_consumer.WORKSPACE,
        value=str(demo_dir / "orders-repo"),
    )
    return fleet


def reaching_reviewers(fleet: Fleet) -> None:
    """The demo's escalations go to the reviewers' pool, are due in 4 hours (2 for a reasoning
    failure, 30 minutes for a packet marked urgent), and are announced by email (files under
    var/mail/ in the embedded default)."""
    reviewer = get_user_model().objects.get(username="reviewer")
    if not reviewer.email:
        reviewer.email = "reviewer@demo.invalid"
        reviewer.save(update_fields=["email"])
    routing.pool_set(fleet=fleet, name="reviewers", usernames=["reviewer"])
    if not RoutingRule.objects.filter(fleet=fleet).exists():
        routing.route_add(fleet=fleet, pool="reviewers")
    routing.due_set(fleet=fleet, minutes=240)
    routing.due_set(fleet=fleet, minutes=120, failure_kind="reasoning")
    routing.due_set(fleet=fleet, minutes=30, urgency="high")
    messages.channel_add(fleet=fleet, kind="email", target="escalations@demo.invalid")


def emails_go() -> str:
    """Where the demo's emails go, as the configured mailer sends them."""
    mailer: dict[str, Any] = settings.MAILERS["default"]
    options: dict[str, Any] = mailer.get("OPTIONS", {})
    backend = str(mailer.get("BACKEND", ""))
    if backend.endswith("filebased.EmailBackend"):
        return f"written as files to {options['file_path']}/"
    if backend.endswith("smtp.EmailBackend"):
        return f"sent by SMTP to {options['host']}:{options['port']}"
    return f"handed to {backend}"


@transaction.atomic
def reset() -> bool:
    """Delete the demo fleet and everything it recorded (runs, escalations, events, deliveries),
    so that `load` plays the stories afresh; other fleets, users and the environment stay."""
    fleet = Fleet.objects.filter(name=FLEET).first()
    if fleet is None:
        return False
    # What protects the fleet's agents and people goes first; the rest follows the fleet.
    Answer.objects.filter(escalation__fleet=fleet).delete()
    FailurePacket.objects.filter(task__run__fleet=fleet).delete()
    Run.objects.filter(fleet=fleet).delete()
    Event.objects.filter(fleet=fleet).delete()
    fleet.delete()
    return True


def load() -> dict[str, Any]:
    """Load what is missing; a story whose run exists is left as it is."""
    fleet = fleet_and_people()
    imported = io.StringIO()
    call_command("import_events", FLEET, str(all_green.IMPORTED), stdout=imported)
    # Agents' follow-ups (verification, the retry policy) happen inline, in story order.
    now = timezone.now()
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    # The notifications are recorded at story time and sent by the worker once the web server
    # is up: each try is logged when it really happened, not at story time.
    try:
        played = []
        with outbox.sending_held():
            for story, run in STORIES:
                if not Run.objects.filter(fleet=fleet, key=run).exists():
                    # Live stories happened just now; the past run keeps its dates.
                    play(fleet, story, steps=DEMO_STEPS.get(story.name), start=recent(story, now))
                    played.append(story.name)
    finally:
        celery_app.conf.task_always_eager = eager
    # What the stories recorded goes out now, through the broker: the worker sends it once the
    # web server that receives it is up, each try logged when it is made.
    pending = Delivery.objects.filter(fleet=fleet, status=Delivery.Status.PENDING, log__isnull=True)
    for delivery_id in pending.order_by("created_at", "id").values_list("pk", flat=True):
        after_commit(deliver, delivery_id)
    runs = dict(Run.objects.filter(fleet=fleet).values_list("key", "pk"))

    def page(key: str) -> str:
        return f"/runs/{runs[key]}/" if key in runs else "/runs/"

    # What each place shows now, as the app computes it (a second `make run` says what changed).
    return {
        "fleet": fleet.name,
        "emails": emails_go(),
        "runs": sorted(runs),
        "played": played,
        "look_at": {
            f"the escalation queue ({waiting_now(fleet)})": "/escalations/",
            f"the all-green replay ({radius_now(fleet, all_green.RUN, all_green.CLAIM)})": page(
                all_green.RUN
            ),
            f"the all-green run as it happened ({radius_now(fleet, PAST_RUN, PAST_CLAIM)})": page(
                PAST_RUN
            ),
            f"the schema agent's careless confirmation ({claim_now(fleet, all_green.CARELESS)})": (
                page(all_green.RUN)
            ),
            f"the forge outage ({forge_now(fleet)})": page(forge_outage.RUN),
            f"the capabilities ({forge_hint(fleet)})": "/capabilities/",
            f"the hung test run ({run_state_now(fleet, hung_test_run.RUN)})": page(
                hung_test_run.RUN
            ),
            f"the halted consumer ({halted_now(fleet)})": page(halted_consumer.RUN),
            f"the tier thresholds ({drafted_now(fleet, tier_thresholds.RUN)})": escalation_page(
                fleet, tier_thresholds.RUN
            ),
            f"one question, two tasks ({shared_now(fleet)})": escalation_page(
                fleet, shared_question.RUN
            ),
            "the reports (as manager)": "/reports/",
        },
    }


PAST_RUN, PAST_CLAIM = "tier-discounts", "plan.customer-tier"  # the seed's invented column


def waiting_now(fleet: Fleet) -> str:
    waiting = Escalation.objects.filter(fleet=fleet, status__in=Escalation.OPEN_STATES)
    first = waiting.select_related("task", "assignee").order_by("opened_at").first()
    if first is None:
        return "nothing waits: every escalation is answered"
    who = f", assigned to {first.assignee.get_username()}" if first.assignee else ""
    due = f", due {first.due_at:%H:%M} UTC" if first.due_at else ""
    return f"{waiting.count()} waiting; the oldest from {first.task.key}{who}{due}"


def radius_now(fleet: Fleet, run_key: str, claim: str) -> str:
    run = Run.objects.filter(fleet=fleet, key=run_key).first()
    if run is None:
        return "not loaded"
    radii = radii_for(run)
    # The invented column's claim; once an answer took its key, its refuted version.
    key = next((k for k in (f"{claim}@refuted-1", claim) if k in radii), None)
    if key is None:
        return "no such claim"
    r = radii[key]
    agents, artifacts = r["agents"], r["artifacts"]
    return (
        f"{agents} agent{'s' if agents != 1 else ''}, {artifacts} artifact"
        f"{'s' if artifacts != 1 else ''}, {r['minutes']:.0f} minutes unchecked"
    )


def claim_now(fleet: Fleet, key: str) -> str:
    claim = Claim.objects.filter(run__fleet=fleet, run__key=all_green.RUN, key=key).first()
    if claim is None:
        return "not loaded"
    return f"{claim.key} {claim.status}: {claim.status_reason}"


def forge_waiting(fleet: Fleet) -> int:
    """The forge outage's tasks waiting with capability:forge now."""
    return (
        Blocker.objects.filter(
            task__run__fleet=fleet, task__run__key=forge_outage.RUN, code="capability:forge",
            cleared_at__isnull=True,
        )
        .values("task")
        .distinct()
        .count()
    )  # fmt: skip


def forge_now(fleet: Fleet) -> str:
    run = Run.objects.filter(fleet=fleet, key=forge_outage.RUN).first()
    if run is None:
        return "not loaded"
    done = run.tasks.filter(state="succeeded").count()
    return f"{done} tasks done, {forge_waiting(fleet)} waiting with capability:forge"


def forge_hint(fleet: Fleet) -> str:
    """What to do on the capabilities board: release the forge's tasks, while any wait on it."""
    return (
        "as manager, mark the forge up to release them"
        if forge_waiting(fleet)
        else "the forge is back: its tasks were released"
    )


def drafted_now(fleet: Fleet, run_key: str) -> str:
    escalation = (
        Escalation.objects.filter(fleet=fleet, run__key=run_key)
        .select_related("packet")
        .order_by("-id")
        .first()
    )
    if escalation is None:
        return "not loaded"
    packet = escalation.packet
    if packet is not None and packet.drafted:
        return f"escalation {escalation.pk}: a packet Bulkhead drafted from the attempts"
    return f"escalation {escalation.pk} is {escalation.status}"


def escalation_page(fleet: Fleet, run_key: str) -> str:
    escalation = Escalation.objects.filter(fleet=fleet, run__key=run_key).order_by("-id").first()
    return f"/escalations/{escalation.pk}/" if escalation else "/escalations/"


def shared_now(fleet: Fleet) -> str:
    escalation = Escalation.objects.filter(fleet=fleet, run__key=shared_question.RUN).first()
    if escalation is None:
        return "not loaded"
    waiting = 1 + JoinedTask.objects.filter(escalation=escalation, left_at__isnull=True).count()
    if escalation.status not in Escalation.OPEN_STATES:
        return f"escalation {escalation.pk} is {escalation.status}"
    return f"escalation {escalation.pk}: {waiting} tasks wait on its one answer"


def run_state_now(fleet: Fleet, run_key: str) -> str:
    run = Run.objects.filter(fleet=fleet, key=run_key).first()
    if run is None:
        return "not loaded"
    return f"{run.state}: {run.cause[:70]}…" if run.cause else run.state


def halted_now(fleet: Fleet) -> str:
    run = Run.objects.filter(fleet=fleet, key=halted_consumer.RUN).first()
    if run is None:
        return "not loaded"
    halted = Halt.objects.filter(task__run=run, settled_at__isnull=True).select_related("task")
    if not halted:
        return "nothing halted: the claim is settled"
    held = (
        Blocker.objects.filter(
            task__run=run, code__in=[f"claim:{h.key}" for h in halted], cleared_at__isnull=True
        )
        .values("task")
        .distinct()
        .count()
    )
    first = halted[0]
    return f"{first.task.key} halted on {first.key}; {held} task{'s' if held != 1 else ''} held"
