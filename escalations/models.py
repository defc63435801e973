"""The human desk: failure packets, escalations and answers."""

from django.conf import settings
from django.db import models

from fleet.models import Agent, Fleet
from runs.models import Run, Task


class FailurePacket(models.Model):
    """What a reviewer reads: the agent's packet, or the one Bulkhead drafted from the attempts.

    A draft (`drafted`) is stored when the retry policy escalates without a packet from the
    agent; its `agent` is the task's, who is asked for the question. Every packet's evidence is
    re-checked against the fleet's sources after commit (`checks`, one per evidence entry).
    """

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="packets")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="packets")
    content = models.JSONField()
    smallest_unblocking_question = models.CharField(max_length=500, blank=True)
    question_key = models.CharField(
        max_length=500,
        blank=True,
        help_text="The question normalised (case, spacing, punctuation): same question, same key.",
    )
    dedup_key = models.CharField(
        max_length=200,
        blank=True,
        help_text="The agent's own key for its question, if it sent one.",
    )
    submitted_at = models.DateTimeField()
    drafted = models.BooleanField(
        default=False, help_text="Drafted by Bulkhead from the attempts, not by the agent."
    )
    from_draft = models.JSONField(
        default=list, blank=True, help_text="Fields the agent left to Bulkhead's draft."
    )
    checks = models.JSONField(
        default=list,
        blank=True,
        help_text="The re-check of each evidence entry: {status, reason, payload}.",
    )
    checks_pending = models.BooleanField(default=False)
    returned_note = models.TextField(
        blank=True, help_text="The note of the reviewer who returned this packet."
    )
    returned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["id"], condition=models.Q(checks_pending=True), name="packet_checks_pending"
            ),
            models.Index(fields=["question_key"], name="packet_question_key"),
            models.Index(fields=["dedup_key"], name="packet_dedup_key"),
        ]

    def __str__(self) -> str:
        return self.smallest_unblocking_question


class Escalation(models.Model):
    class Status(models.TextChoices):
        OPEN = "open"
        CLAIMED = "claimed"
        ANSWERED = "answered"
        RETURNED = "returned"
        CLOSED = "closed"

    class Outcome(models.TextChoices):
        """How a closed escalation ended: `status` stays `closed`, this says which way."""

        NONE = ""
        REROUTED = "rerouted"
        ABORTED = "aborted"
        RUN_FAILED = "run_failed"
        JOINED = "joined"

    OPEN_STATES = (Status.OPEN, Status.CLAIMED)

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="escalations")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="escalations")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="escalations")
    packet = models.ForeignKey(FailurePacket, null=True, blank=True, on_delete=models.SET_NULL)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    reason = models.TextField(blank=True, help_text="Why the work was escalated.")
    attempt_number = models.PositiveIntegerField(default=0)
    opened_at = models.DateTimeField()
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    first_looked_at = models.DateTimeField(null=True, blank=True)
    packet_opened_at = models.DateTimeField(null=True, blank=True)
    acted_at = models.DateTimeField(null=True, blank=True)
    returned_reason = models.TextField(blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Routing and due times: who it is assigned to, in which pool and tier, and by when.
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    pool = models.ForeignKey(
        "Pool", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    tier = models.PositiveSmallIntegerField(default=1)
    last_tier = models.PositiveSmallIntegerField(
        default=1, help_text="The managers' tier: the last one an overdue escalation reaches."
    )
    next_pool = models.ForeignKey(
        "Pool", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    due_at = models.DateTimeField(null=True, blank=True)
    next_step_at = models.DateTimeField(
        null=True, blank=True, help_text="When the due-time sweep has a reminder or tier to do."
    )
    urgency = models.CharField(max_length=10, blank=True)
    failure_kind = models.CharField(max_length=20, blank=True)
    outcome = models.CharField(
        max_length=20, choices=Outcome.choices, blank=True, default=Outcome.NONE
    )

    class Meta:
        indexes = [
            models.Index(
                fields=["next_step_at"],
                condition=models.Q(status__in=["open", "claimed"], next_step_at__isnull=False),
                name="escalation_next_step",
            ),
            models.Index(fields=["fleet", "status", "opened_at", "id"]),
            models.Index(fields=["status", "opened_at", "id"]),
            models.Index(fields=["task", "status"]),
            # The queue's default view, waiting (open or claimed) oldest or newest first: read in
            # order from here, a page stops after its rows instead of sorting every match.
            models.Index(
                fields=["opened_at", "id"],
                condition=models.Q(status__in=["open", "claimed"]),
                name="escalation_waiting_order",
            ),
            # Every escalation whatever its status, in the queue's order (its "all" view).
            models.Index(fields=["opened_at", "id"], name="escalation_order"),
            # Waiting at the managers' tier (no pool left to move to): "my pools" for a manager.
            models.Index(
                fields=["fleet", "opened_at", "id"],
                condition=models.Q(
                    status__in=["open", "claimed"],
                    pool__isnull=True,
                    tier__gt=1,
                    tier__gte=models.F("last_tier"),
                ),
                name="escalation_managers_tier",
            ),
        ]

    def __str__(self) -> str:
        return f"escalation {self.pk} ({self.status})"


class JoinedTask(models.Model):
    """A task waiting on another task's escalation: its packet asked the same question.

    The escalation's own task is `Escalation.task`; each task that joined it has a row here,
    with its own packet. One answer reframes and releases them all; a reviewer can split one
    off (it gets an escalation of its own), and it leaves when its run is over.
    """

    class Left(models.TextChoices):
        WAITING = ""
        ANSWERED = "answered"
        SPLIT = "split"
        MOVED = "moved"
        CLOSED = "closed"

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="joined")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="joined_escalations")
    packet = models.ForeignKey(FailurePacket, null=True, blank=True, on_delete=models.SET_NULL)
    joined_at = models.DateTimeField()
    left_at = models.DateTimeField(null=True, blank=True)
    left = models.CharField(max_length=10, choices=Left.choices, blank=True, default=Left.WAITING)
    note = models.TextField(blank=True, help_text="Why it left: who split it off, where it went.")

    class Meta:
        indexes = [
            models.Index(fields=["task", "left_at"]),
            models.Index(fields=["escalation", "left_at"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["task"],
                condition=models.Q(left_at__isnull=True),
                name="task_joins_one_escalation",
            )
        ]

    def __str__(self) -> str:
        return f"{self.task_id} on escalation {self.escalation_id}"


class Answer(models.Model):
    escalation = models.OneToOneField(Escalation, on_delete=models.CASCADE, related_name="answer")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    text = models.TextField()
    option = models.CharField(max_length=500, blank=True)
    answered_at = models.DateTimeField()
    released = models.JSONField(default=list, blank=True, help_text="Tasks the answer released.")


# Reaching reviewers in time: channels, pools, routing, due times and the messages sent.


class Channel(models.Model):
    """Where a fleet's escalations are announced (`fleet`), or where a reviewer is reached (`user`).

    Email goes through Django's email backend; chat (Slack, Teams, Discord, any incoming
    webhook) through Apprise, whose URL names the service (`slack://…`, `msteams://…`, `json://…`).
    """

    class Kind(models.TextChoices):
        EMAIL = "email"
        CHAT = "chat"

    fleet = models.ForeignKey(
        Fleet, null=True, blank=True, on_delete=models.CASCADE, related_name="desk_channels"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="desk_channels",
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    target = models.CharField(max_length=1000, help_text="An email address or an Apprise URL.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(fleet__isnull=False, user__isnull=True)
                | models.Q(fleet__isnull=True, user__isnull=False),
                name="channel_of_a_fleet_or_a_reviewer",
            ),
            models.UniqueConstraint(
                fields=["fleet", "user", "kind", "target"], name="one_channel_per_target"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} channel {self.pk}"


class Pool(models.Model):
    """Reviewers who take a fleet's escalations in turn."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="pools")
    name = models.SlugField(max_length=100)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["fleet", "name"], name="pool_name_per_fleet")
        ]

    def __str__(self) -> str:
        return self.name


class PoolMember(models.Model):
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    last_assigned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["pool", "user"], name="one_seat_per_pool")]


class Availability(models.Model):
    """A reviewer who is away is skipped when escalations are assigned."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="availability"
    )
    away = models.BooleanField(default=False)
    changed_at = models.DateTimeField()


class RoutingRule(models.Model):
    """A new escalation goes to the pool of the first rule (by position) that matches it; an
    empty condition matches anything. Overdue, it goes to `next_pool`, then to the managers."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="routing_rules")
    position = models.PositiveIntegerField(default=0)
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="+")
    next_pool = models.ForeignKey(
        Pool, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    agent_role = models.CharField(max_length=100, blank=True)
    capability = models.CharField(max_length=100, blank=True)
    run = models.CharField(max_length=200, blank=True)
    failure_kind = models.CharField(max_length=20, blank=True)

    class Meta:
        ordering = ["position", "id"]


class DueRule(models.Model):
    """How long an escalation may wait: by failure kind, by the packet's urgency, or (neither)
    the fleet's default. When several match, the earliest due time wins."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="due_rules")
    failure_kind = models.CharField(max_length=20, blank=True)
    urgency = models.CharField(max_length=10, blank=True)
    minutes = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "failure_kind", "urgency"], name="one_due_rule_per_match"
            )
        ]


class Assignment(models.Model):
    """An escalation's assignment history: routed, handed off, moved up a tier."""

    class Kind(models.TextChoices):
        ROUTED = "routed"
        HANDED_OFF = "handed-off"
        TIER = "tier"

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="assignments")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    at = models.DateTimeField()
    tier = models.PositiveSmallIntegerField(default=1)
    pool = models.ForeignKey(
        Pool, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    to_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]


class EscalationStep(models.Model):
    """A reminder or a tier change the due-time sweep made: each happens once (the constraint)."""

    class Kind(models.TextChoices):
        REMINDER = "reminder"
        TIER = "tier"

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="steps")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    tier = models.PositiveSmallIntegerField()
    due_at = models.DateTimeField(help_text="When the step fell due.")
    done_at = models.DateTimeField()
    reached = models.PositiveIntegerField(
        null=True, blank=True, help_text="Messages it wrote (None: made before they were counted)."
    )
    note = models.CharField(max_length=500, blank=True, help_text="Whom it could not reach.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["escalation", "kind", "tier"], name="one_step_each")
        ]


class Message(models.Model):
    """An email or chat message about an escalation (the desk's outbox), sent by a worker."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="messages")
    channel = models.ForeignKey(
        Channel, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    kind = models.CharField(max_length=10, choices=Channel.Kind.choices)
    target = models.CharField(max_length=1000)
    reason = models.CharField(max_length=20)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.CharField(max_length=500, blank=True)
    log = models.JSONField(default=list, blank=True, help_text="Each try: {at, ok, error}.")
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.kind} message {self.pk} ({self.status})"
