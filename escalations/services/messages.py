"""Messages about escalations, by email and chat: written in the caller's transaction (the desk's
outbox), sent by a worker after commit, retried with backoff and logged on the row.

Email goes through Django's email backend (SMTP in production, files under `var/mail/` in the
embedded default); chat through Apprise, whose URL names the service. A send is leased like a
delivery: the row is taken in one short transaction, the message sent outside any, the result
written in another; a worker killed in between leaves it due again for the reconciler. A message
is retried for a day (backoff up to 5 minutes), so an outage of the mail server or the chat
service of some hours loses nothing.
"""

import logging
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import apprise
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import connection, transaction
from django.utils import timezone

from escalations import links, routing_config, tasks
from escalations.models import Channel, Escalation, Message
from fleet.broker import after_commit, countdown
from fleet.deliveries import backoff, storable
from fleet.errors import Refusal, error
from fleet.models import Fleet

log = logging.getLogger(__name__)

# A chat service may take this long to answer (Apprise's own default is 4 s: a slow service that
# accepts the message would be sent it again on every retry); the whole call, connect included,
# ends within CHAT_CALL_S, well inside the lease.
CHAT_CONNECT_S = 10.0
CHAT_TIMEOUT_S = 30.0
CHAT_CALL_S = CHAT_CONNECT_S + CHAT_TIMEOUT_S + 5
LEASE_S = 60.0
RETRY_WINDOW_S = 24 * 3600.0
MAX_DELAY_S = 300.0
LOG_TRIES = 50  # the log keeps the latest tries (`attempts` counts them all)


def max_attempts() -> int:
    """Tries before a message is failed; 0: as many as its retry window allows."""
    return int(getattr(settings, "ESCALATION_MESSAGE_MAX_ATTEMPTS", 0) or 0)


def retry_window_s() -> float:
    return float(getattr(settings, "ESCALATION_MESSAGE_RETRY_WINDOW_SECONDS", RETRY_WINDOW_S))


# Configuring channels.

MAX_EMAIL_CHARS = 254


def checked_target(kind: str, target: str) -> str:
    target = target.strip()
    if kind == Channel.Kind.EMAIL:
        if len(target) > MAX_EMAIL_CHARS:  # what a mail server takes in a path (RFC 5321)
            raise Refusal(
                [error("target", f"is {len(target):,} characters; an email address has at most "
                                 f"{MAX_EMAIL_CHARS}")]
            )  # fmt: skip
        try:
            validate_email(target)
        except ValidationError:
            raise Refusal([error("target", f"{target!r} is not an email address")]) from None
        return target
    if kind == Channel.Kind.CHAT:
        if apprise.Apprise.instantiate(target) is None:
            raise Refusal(
                [
                    error(
                        "target",
                        f"{target[:100]!r} is not a chat URL Apprise knows: use slack://…, "
                        "msteams://…, discord://…, or json://host/path for any incoming webhook",
                    )
                ]
            )
        return target
    raise Refusal([error("kind", f"{kind!r} is not a channel kind: email or chat")])


@transaction.atomic
def channel_add(*, kind: str, target: str, fleet: Fleet | None = None, user: Any = None) -> Channel:
    """A channel of a fleet (where its escalations are announced) or of a reviewer."""
    assert (fleet is None) != (user is None)
    target = checked_target(kind, target)
    if len(target) > 1000:
        raise Refusal([error("target", "is longer than 1000 characters")])
    channel, _ = Channel.objects.get_or_create(fleet=fleet, user=user, kind=kind, target=target)
    return channel


@transaction.atomic
def channel_remove(*, channel: Channel) -> None:
    channel.delete()


def shown_target(channel_kind: str, target: str) -> str:
    """A chat URL's secrets (tokens, passwords) are not shown: Apprise's private form of it."""
    if channel_kind != Channel.Kind.CHAT:
        return target
    plugin = apprise.Apprise.instantiate(target)
    # Its private form, without the options Apprise spells out (?image=yes&footer=yes&…).
    return plugin.url(privacy=True).split("?")[0] if plugin is not None else target[:20] + "…"


# Writing messages.

# Everything str.splitlines() breaks at: a header holding one is refused by the mailer.
_LINE_BREAKS = re.compile("[\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]+")


def one_line(text: str) -> str:
    """A header's value: every line break (U+2028 in a key, say) as a space."""
    return _LINE_BREAKS.sub(" ", text)


def compose(
    escalation: Escalation, reason: str, now: datetime, *, headline: str = "", note: str = ""
) -> tuple[str, str]:
    """The subject and body: the question, the run and task, how long it waited, its due time
    and a signed link to the packet page. `headline` says more than the reason's own (who it
    moved to, who handed it); `note` is a line of its own (a hand-off's note)."""
    question = (
        escalation.packet.smallest_unblocking_question if escalation.packet is not None else ""
    ) or "(Bulkhead drafted the packet; the agent's question is not in yet)"
    default_headline = {
        "opened": "New escalation",
        "assigned": "Assigned to you",
        "handed-off": "Handed to you",
        "question": "The agent's question is in",
        "reminder": "Reminder: half its time is gone",
        "tier": "Overdue: moved to you",
    }.get(reason, "Escalation")
    headline = headline or default_headline
    waited = now - escalation.opened_at
    minutes = max(0, int(waited.total_seconds() // 60))
    due = (
        timezone.localtime(escalation.due_at, timezone.get_fixed_timezone(0)).strftime(
            "%Y-%m-%d %H:%M UTC"
        )
        if escalation.due_at
        else "no due time"
    )
    subject = one_line(f"[Bulkhead] {headline}: {escalation.run.key} / {escalation.task.key}")
    body = "\n".join(
        [
            f"{headline}.",
            *([f"Note: {note}"] if note else []),
            "",
            f"Question: {question}",
            f"Run: {escalation.run.key}  Task: {escalation.task.key}",
            f"Waiting: {minutes // 60}h {minutes % 60}m  Due: {due}"
            + ("  (overdue)" if escalation.due_at and now >= escalation.due_at else ""),
            "",
            f"Open the packet (sign-in required; the link expires): "
            f"{links.link_for(escalation.pk)}",
        ]
    )
    return subject[:300], body


Target = tuple[int | None, str, str]  # a channel's id (None: an account's email), kind, target


def channels_of(user: Any) -> list[tuple[Channel | None, str, str]]:
    """A reviewer's channels; with none, the email address of their account."""
    found: list[tuple[Channel | None, str, str]] = [
        (c, c.kind, c.target) for c in Channel.objects.filter(user=user).order_by("id")
    ]
    if not found and str(getattr(user, "email", "") or ""):
        return [(None, Channel.Kind.EMAIL, user.email)]
    return found


def queue_messages(
    escalation: Escalation,
    reason: str,
    *,
    users: list[Any] = (),  # type: ignore[assignment]
    fleet_channels: bool = False,
    at: datetime | None = None,
    headline: str = "",
    fleet_headline: str = "",
    note: str = "",
) -> list[Message]:
    """Write the messages (in the caller's transaction) and send each after commit. The fleet's
    channels get `fleet_headline` when given (they are not who it went to), the users
    `headline`."""
    reached: list[Target] = []
    for user in users:
        reached += [(c.pk if c else None, kind, target) for c, kind, target in channels_of(user)]
    announced: list[Target] = []
    if fleet_channels:
        theirs = {(kind, target) for _, kind, target in reached}
        announced = [
            channel
            for channel in routing_config.config_of(escalation.fleet_id).channels
            if (channel[1], channel[2]) not in theirs
        ]
    return queue_many(
        escalation,
        [(reason, announced, fleet_headline or headline), (reason, reached, headline)],
        at=at,
        note=note,
    )


Batch = tuple[
    str, Sequence[Target], str
]  # the reason, its targets, its headline ("": the reason's)


def queue_many(
    escalation: Escalation,
    batches: Sequence[Batch],
    *,
    at: datetime | None = None,
    note: str = "",
) -> list[Message]:
    """Write the messages, each (reason, targets, headline) of `batches` once per target, in one
    statement (in the caller's transaction), and send each after commit."""
    now = at or timezone.now()
    rows = []
    for reason, targets, headline in batches:
        seen: set[tuple[str, str]] = set()
        if not targets:
            continue
        subject, body = compose(escalation, reason, now, headline=headline, note=note)
        written = timezone.now()
        for channel_id, kind, target in targets:
            if (kind, target) in seen:
                continue
            seen.add((kind, target))
            rows.append(
                Message(
                    escalation=escalation,
                    channel_id=channel_id,
                    kind=kind,
                    target=target,
                    reason=reason,
                    subject=subject,
                    body=body,
                    next_attempt_at=written,
                    created_at=written,
                )
            )
    if not rows:
        return []
    if connection.features.can_return_rows_from_bulk_insert:
        Message.objects.bulk_create(rows)
    else:
        for row in rows:
            row.save(force_insert=True)
    for message in rows:
        after_commit(tasks.send_message, message.pk)
    return rows


# Sending.


def deliver(kind: str, target: str, subject: str, body: str) -> str:
    """Send one message; returns "" when sent, else what went wrong."""
    subject = one_line(subject)  # one written before line breaks were taken out is sent too
    if kind == Channel.Kind.EMAIL:
        try:
            send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [target])
        except Exception as exc:  # SMTP, socket and backend errors alike: logged and retried
            return f"{exc.__class__.__name__}: {exc}"[:500]
        return ""
    plugin = apprise.Apprise.instantiate(target)
    if plugin is None:
        return "Apprise does not know this URL"
    # Longer than Apprise's defaults, never shorter than the URL's own (?cto=…&rto=…).
    plugin.socket_connect_timeout = max(plugin.socket_connect_timeout, CHAT_CONNECT_S)
    plugin.socket_read_timeout = max(plugin.socket_read_timeout, CHAT_TIMEOUT_S)
    notifier = apprise.Apprise()
    notifier.add(plugin)
    with apprise.LogCapture(level=logging.DEBUG, fmt="%(levelname)s %(message)s") as captured:
        sent = notifier.notify(body=body, title=subject, timeout=CHAT_CALL_S)
    if sent:
        return ""
    return chat_problem(captured.getvalue(), plugin.socket_read_timeout)


def chat_problem(logged: str, read_timeout: float) -> str:
    """What Apprise said went wrong: its last warning or error, or that the service took too
    long (Apprise calls a timeout "a Connection error", and says "timed out" only in debug)."""
    lines = logged.strip().splitlines()
    if any("timed out" in line.lower() for line in lines if line.startswith("DEBUG ")):
        return f"timed out: the chat service did not answer within {read_timeout:g} s"
    said = [line.split(" ", 1)[-1] for line in lines if line.startswith(("WARNING ", "ERROR "))]
    return (said[-1] if said else "Apprise could not send the message")[:500]


def send(message_id: int) -> str:
    """Send one message if it is due; returns its status afterwards ("skipped", "not due")."""
    with transaction.atomic():
        message = (
            Message.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(pk=message_id, status=Message.Status.PENDING)
            .first()
        )
        if message is None:
            return "skipped"
        now = timezone.now()
        if message.next_attempt_at > now:
            return "not due"
        message.attempts += 1
        message.next_attempt_at = now + timedelta(seconds=LEASE_S)
        message.save(update_fields=["attempts", "next_attempt_at"])
        kind, target, subject, body = message.kind, message.target, message.subject, message.body
        number = message.attempts
    problem = deliver(kind, target, subject, body)
    return record(message_id, number, problem)


@transaction.atomic
def record(message_id: int, number: int, problem: str) -> str:
    message = Message.objects.select_for_update(of=("self",)).filter(pk=message_id).first()
    if message is None:
        return "skipped"
    now = timezone.now()
    # What an SMTP server or a chat service said, as PostgreSQL holds it.
    problem = storable(problem)
    tried = {"at": now.isoformat(), "ok": not problem, "error": problem}
    message.log = [*message.log, tried][-LOG_TRIES:]
    message.last_error = problem
    if message.status != Message.Status.PENDING:
        message.save(update_fields=["log", "last_error"])
        return message.status
    limit = max_attempts()
    if not problem:
        message.status = Message.Status.SENT
        message.sent_at = now
    elif (limit and message.attempts >= limit) or (
        now - message.created_at
    ).total_seconds() >= retry_window_s():
        message.status = Message.Status.FAILED
    elif message.attempts == number:
        wait = backoff(message.attempts, cap=MAX_DELAY_S)
        message.next_attempt_at = now + timedelta(seconds=wait)
        after_commit(tasks.send_message, message.pk, countdown=countdown(wait))
    message.save()
    if problem:
        log.warning("message %s (%s) not sent: %s", message.pk, message.kind, problem)
    return message.status


def reenqueue(now: datetime, **_: Any) -> dict[str, int]:
    """The reconciler: pending messages due for a while lost their send; send them again."""
    grace = now - timedelta(seconds=settings.RECONCILE_GRACE_SECONDS)
    due = list(
        Message.objects.filter(status=Message.Status.PENDING, next_attempt_at__lte=grace)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:500]
    )
    for message_id in due:
        tasks.send_message.delay(message_id)
    return {"messages": len(due)}
