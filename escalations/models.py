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
    outcome = models.CharField(
        max_length=20, choices=Outcome.choices, blank=True, default=Outcome.NONE
    )

    class Meta:
        indexes = [
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
