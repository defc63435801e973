"""The packet page's reads: the question, its claims' radius, what an answer releases, history."""

from dataclasses import replace
from datetime import datetime
from typing import Any

from django.utils import timezone

from escalations.models import Answer, Assignment, Escalation, EscalationStep, FailurePacket
from escalations.packet_draft import missing_fields
from escalations.selectors.attempts import claims_of_task, recorded_attempts
from escalations.selectors.evidence import evidence_rows
from escalations.selectors.radius import REVIEWER, claim_facts, radii_for
from escalations.selectors.waiting import tasks_waiting
from escalations.services.messages import shown_target
from fleet.models import Agent, Delivery
from runs import frontier, scheduler
from runs.claims.bearing import cites_an_agent
from runs.models import Artifact, Claim, Decision, Evidence, Run, Task
from runs.release import released_by


def release_preview(escalation: Escalation, task: Task | None = None) -> list[str]:
    """The tasks an answer would release now (what `escalation_answer` will compute), for the
    escalation's task or for `task`, one that joined it."""
    task = task or escalation.task
    run = task.run
    nodes, world = scheduler.facts_of(run)
    key = task.key
    if key not in nodes:
        return []
    nodes[key] = replace(nodes[key], state="pending")
    others = tuple(e for e in world.escalations.get(key, ()) if e != str(escalation.pk))
    escalations = {k: v for k, v in world.escalations.items() if k != key}
    if others:
        escalations[key] = others
    # The answer takes the place of the task's refuted load-bearing claims (supersede_refuted).
    claims = dict(world.claims)
    for claim in Claim.objects.filter(
        task=task, status=Claim.Status.REFUTED, load_bearing=True
    ).values_list("key", flat=True):
        claims[claim] = frontier.ClaimView(status=Claim.Status.VERIFIED, load_bearing=True)
    return released_by(nodes, replace(world, escalations=escalations, claims=claims), key)


def packet_view(escalation: Escalation, *, now: datetime) -> dict[str, Any]:
    """Everything the packet page shows, the question first."""
    task = escalation.task
    run = escalation.run
    packet = escalation.packet
    content = packet.content if packet else {}
    if not isinstance(content, dict):
        content = {}
    claims = claims_of_task(task)
    radii = radii_for(run, now=now) if claims else {}
    claim_rows = [claim_view(c, radii.get(c.key)) for c in claims]
    answer = Answer.objects.filter(escalation=escalation).select_related("reviewer").first()
    is_open = escalation.status in Escalation.OPEN_STATES
    waiting = tasks_waiting(escalation)
    if is_open and run.state == Run.State.RUNNING:
        release = release_preview(escalation)
        for row in waiting[1:]:
            joined = Task.objects.select_related("run").get(pk=row["id"])
            if joined.run.state == Run.State.RUNNING:
                release += [
                    k if joined.run_id == run.pk else f"{joined.run.key}/{k}"
                    for k in release_preview(escalation, joined)
                ]
    else:
        release = list(answer.released) if answer else []
    reframed = {w["task"] if w["run"] == run.key else f"{w['run']}/{w['task']}" for w in waiting}
    agents = dict(Task.objects.filter(run=run, key__in=release).values_list("key", "agent__name"))
    for shown in release:
        if "/" in shown:
            other_run, key = shown.split("/", 1)
            agents[shown] = (
                Task.objects.filter(run__fleet_id=run.fleet_id, run__key=other_run, key=key)
                .values_list("agent__name", flat=True)
                .first()
                or ""
            )
    tried = [str(t) for t in content.get("tried") or []]
    return {
        "question": content.get("smallest_unblocking_question") or "",
        "drafted": bool(packet and packet.drafted),
        "from_draft": list(packet.from_draft) if packet else [],
        "missing_words": asked_for(missing_fields(content)) if packet and packet.drafted else "",
        "tried": tried,
        # Beside the agent's account, what Bulkhead recorded (the draft is that record already).
        "attempts": recorded_attempts(task, [] if packet and packet.drafted else tried),
        "ruled_out": [r for r in content.get("ruled_out") or [] if isinstance(r, dict)],
        "evidence": evidence_rows(packet),
        "checks_pending": bool(packet and packet.checks_pending),
        "options": [str(o) for o in content.get("options") or []],
        "claims": claim_rows,
        "release": [
            {"key": k, "agent": agents.get(k, ""), "reframed": k in reframed} for k in release
        ],
        "waiting": waiting,
        "joined_count": len(waiting) - 1,
        "blast": blast_of(run, claims, claim_rows, now=now),
        "answer": answer,
        "history": history_of(escalation),
        "reroute_to": list(
            Agent.objects.filter(fleet_id=run.fleet_id)
            .exclude(pk=task.agent_id)
            .order_by("name")
            .values("name", "role", "is_tool")
        ),
        "is_open": is_open,
    }


MISSING_WORDS = {
    "smallest_unblocking_question": "the smallest unblocking question",
    "tried": "what it tried",
    "evidence": "evidence a verifier can re-check",
}


def asked_for(missing: tuple[str, ...]) -> str:
    """What the draft leaves to the agent, as the page says it."""
    words = [MISSING_WORDS.get(name, name) for name in missing]
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def blast_of(
    run: Run, claims: list[Claim], claim_rows: list[dict[str, Any]], *, now: datetime
) -> dict[str, Any]:
    """How far the packet's claims reach: the tasks, their agents, the artifacts those tasks
    reported while a claim that reached them was unchecked (as each claim's own radius counts
    them), and the longest any of them stayed unchecked."""
    affected = sorted({k for c in claim_rows if c["radius"] for k in c["radius"]["tasks"]})
    facts = claim_facts(claims, set(), lambda _run, name: name)  # the radius rule's own view
    windows = [  # the tasks each claim reached, and until when it travelled unchecked
        (set(row["radius"]["tasks"]), facts[claim.key].unchecked_until(now))
        for claim, row in zip(claims, claim_rows, strict=True)
        if row["radius"]
    ]
    reported = Artifact.objects.filter(task__run=run, task__key__in=affected).values_list(
        "task__key", "created_at"
    )
    return {
        "tasks": affected,
        "agents": len(
            set(Task.objects.filter(run=run, key__in=affected).values_list("agent_id", flat=True))
        ),
        "artifacts": sum(
            any(key in tasks and at <= until for tasks, until in windows) for key, at in reported
        ),
        "minutes": max((c["radius"]["minutes"] for c in claim_rows if c["radius"]), default=0),
    }


def producer_of(claim: Claim) -> str:
    """The agent that posted it and its task, as "planner (task plan)"."""
    agent = claim.posted_by.removeprefix("agent:")
    return f"{agent} (task {claim.task.key})" if agent else claim.task.key


def claim_view(claim: Claim, radius: dict[str, Any] | None) -> dict[str, Any]:
    evidence = list(claim.evidence.all())
    posted = [e for e in evidence if e.role == Evidence.Role.POSTED]
    checkable = [e for e in posted if not cites_an_agent(e.source)]
    return {
        "id": claim.pk,
        "key": claim.key,
        "statement": claim.statement,
        "status": claim.status,
        "reason": claim.status_reason,
        "load_bearing": claim.load_bearing,
        "producer": claim.posted_by if answered_by_reviewer(claim) else producer_of(claim),
        "pending": claim.verification_pending,
        "checked_by": claim.checked_by,
        "evidence": evidence,
        "can_recheck": claim.status == Claim.Status.UNVERIFIED and bool(checkable),
        "radius": radius,
    }


def history_of(escalation: Escalation) -> list[dict[str, Any]]:
    """The task's story, oldest first: attempts, decisions, packets, escalations, deliveries."""
    task = escalation.task
    items = [
        *attempt_history(task),
        *(
            {"at": d.created_at, "what": f"decision: {d.action}", "detail": d.reason}
            for d in Decision.objects.filter(task=task).order_by("created_at", "id")
        ),
        *(
            {
                "at": p.submitted_at,
                "what": f"packet from {p.agent.name}",
                "detail": p.smallest_unblocking_question,
            }
            for p in FailurePacket.objects.filter(task=task, drafted=False).select_related("agent")
        ),
        *(
            {
                "at": p.submitted_at,
                "what": "packet drafted by Bulkhead from the attempts",
                "detail": f"{p.agent.name} was asked for the question",
            }
            for p in FailurePacket.objects.filter(task=task, drafted=True).select_related("agent")
        ),
        *escalation_history(task),
        *delivery_history(escalation),
        *assignment_history(escalation),
    ]
    return sorted(items, key=lambda item: item["at"])


def attempt_history(task: Task) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for a in task.attempts.select_related("agent").order_by("number"):
        items.append(
            {
                "at": a.started_at,
                "what": f"attempt {a.number} started",
                "detail": f"{a.agent.name}, prompt {a.prompt_hash}, context {a.context_hash}",
            }
        )
        if a.finished_at and a.outcome:
            failure = " ".join(
                x for x in (a.failure_kind, a.failure_signature, a.failure_message) if x
            )
            items.append(
                {
                    "at": a.finished_at,
                    "what": f"attempt {a.number} {a.outcome}",
                    "detail": failure,
                }
            )
    return items


def escalation_history(task: Task) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for e in (
        Escalation.objects.filter(task=task).select_related("claimed_by", "answer").order_by("id")
    ):
        items.append({"at": e.opened_at, "what": f"escalation {e.pk} opened", "detail": e.reason})
        if e.status not in Escalation.OPEN_STATES and e.acted_at:
            who = e.claimed_by.get_username() if e.claimed_by else "someone"
            answer = getattr(e, "answer", None)
            # How it ended: the answer, or the note a return, reroute or abort left.
            detail = answer.text if answer else e.returned_reason.replace("\n", "; ")
            items.append(
                {
                    "at": e.acted_at,
                    "what": f"escalation {e.pk} {ended(e)} by {who}",
                    "detail": detail,
                }
            )
    return items


def ended(escalation: Escalation) -> str:
    """How the history says it ended: rerouted and aborted by name, else its status."""
    if escalation.outcome in (Escalation.Outcome.REROUTED, Escalation.Outcome.ABORTED):
        return str(escalation.outcome)
    return str(escalation.status)


def delivery_history(escalation: Escalation) -> list[dict[str, Any]]:
    """What was sent to the fleet about the task, its first 50 notifications."""
    return [
        {
            "at": delivery.created_at,
            "what": f"{delivery.type} for the fleet's callback",
            "detail": delivery_detail(delivery),
        }
        for delivery in Delivery.objects.filter(
            fleet_id=escalation.fleet_id,
            payload__data__run=escalation.run.key,
            payload__data__task=escalation.task.key,
        ).order_by("created_at", "id")[:50]
    ]


def delivery_detail(delivery: Delivery) -> str:
    """How its sending went: when it was delivered (it is listed when it was recorded), or its
    status now."""
    tries = f" after {delivery.attempts} tries" if delivery.attempts > 1 else ""
    if delivery.delivered_at is not None:
        return f"delivered at {timezone.localtime(delivery.delivered_at):%H:%M:%S}{tries}"
    return f"{delivery.status}{tries}"


def assignment_history(escalation: Escalation) -> list[dict[str, Any]]:
    """Who it was assigned to and why (routed, handed off, moved up a tier), the reminders and
    the messages sent about it (email and chat, with how each try went)."""
    items: list[dict[str, Any]] = []
    for a in escalation.assignments.select_related("to_user", "by_user", "pool"):
        who = a.to_user.get_username() if a.to_user else "nobody"
        if a.kind == Assignment.Kind.HANDED_OFF:
            by = a.by_user.get_username() if a.by_user else "someone"
            items.append({"at": a.at, "what": f"handed off to {who} by {by}", "detail": a.note})
        elif a.kind == Assignment.Kind.TIER:
            items.append({"at": a.at, "what": f"overdue: tier {a.tier}", "detail": a.note})
        else:
            items.append({"at": a.at, "what": f"assigned to {who}", "detail": a.note})
    for step in escalation.steps.all():
        if step.kind == EscalationStep.Kind.REMINDER:
            detail = "half its time is gone" + (f"; {step.note}" if step.note else "")
            items.append(
                {"at": step.done_at, "what": f"reminder (tier {step.tier})", "detail": detail}
            )
        elif step.note:  # the tier move itself is in the assignments
            items.append(
                {"at": step.done_at, "what": f"tier {step.tier} told", "detail": step.note}
            )
    for m in escalation.messages.order_by("id")[:50]:
        tries = f"{m.attempts} tr{'y' if m.attempts == 1 else 'ies'}"
        detail = f"{m.reason} to {shown_target(m.kind, m.target)}: {m.status} after {tries}"
        if m.sent_at is not None:  # listed when it was queued; sent when a worker got to it
            detail += f", at {timezone.localtime(m.sent_at):%H:%M:%S}"
        if m.last_error:
            detail += f" — {m.last_error}"
        items.append({"at": m.created_at, "what": f"{m.kind} message", "detail": detail})
    return items


def answered_by_reviewer(claim: Claim) -> bool:
    """A reviewer's answer, stored as a verified claim on the task it answered."""
    return claim.posted_by.startswith(REVIEWER)
