"""The work: runs, tasks and their prerequisites, attempts, claims and evidence, blockers, decisions."""

from django.db import models
from django.db.models import Q

from fleet.models import Agent, Fleet


class Run(models.Model):
    class Policy(models.TextChoices):
        SCOPED = "scoped"
        GLOBAL_HALT = "global_halt"

    class State(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    # Indexed by the run's key and its state, both led by the fleet: an index of the fleet
    # alone was what a planner behind the fleet's growth read every run of it by.
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="runs", db_index=False)
    key = models.CharField(max_length=200)
    title = models.CharField(max_length=300, blank=True)
    policy = models.CharField(max_length=20, choices=Policy.choices, default=Policy.SCOPED)
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    cause = models.TextField(blank=True, help_text="The full failure cause, when the run failed.")
    started_by = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs_started")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    imported = models.BooleanField(default=False, help_text="Recorded from a past run's events.")
    declaration = models.CharField(
        max_length=64,
        blank=True,
        editable=False,
        help_text="The canonical digest of the tasks run.started declared (a re-send is a no-op).",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["fleet", "key"], name="run_key_per_fleet")]
        indexes = [models.Index(fields=["fleet", "state"])]

    def __str__(self) -> str:
        return self.key


class FrontierChange(models.Model):
    """A change the run's stored frontier has not caught up with yet (deleted once it has).

    Rows are only inserted by the events that change a run, so they never contend with each
    other; the reconciler finds runs that still have some and recomputes them. Each row says what
    changed, so that one recompute catches up with every change pending (the messages after it
    find nothing left to do).
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="frontier_changes")
    created_at = models.DateTimeField(auto_now_add=True)
    keys = models.JSONField(null=True, default=list, help_text="The tasks changed; null: all.")
    capability = models.CharField(max_length=100, blank=True)
    claims = models.JSONField(default=list)
    may_hold = models.BooleanField(
        default=True,
        help_text="It may hold back a task the stored frontier has ready (a start, a success or "
        "a running task's claim cannot: the start gate trusts `ready` past those).",
    )

    class Meta:
        indexes = [models.Index(fields=["created_at"])]


class Task(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        ESCALATED = "escalated"
        CANCELLED = "cancelled"

    class Effect(models.TextChoices):
        NONE = "none"
        REVERSIBLE = "reversible"
        EXTERNAL = "external"

    class Confidence(models.TextChoices):
        DECLARED = "declared"
        UNCERTAIN = "uncertain"

    UNFINISHED = (State.PENDING, State.RUNNING, State.ESCALATED)

    # No index of its own: (run, key) and the other indexes below lead with it.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tasks", db_index=False)
    key = models.CharField(max_length=200)
    title = models.CharField(max_length=300, blank=True)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="tasks")
    position = models.PositiveIntegerField(help_text="Order of declaration in the run.")
    capabilities = models.JSONField(default=list, blank=True)
    reads_state_of = models.JSONField(default=list, blank=True)
    effect = models.CharField(max_length=10, choices=Effect.choices, default=Effect.NONE)
    dependency_confidence = models.CharField(
        max_length=10, choices=Confidence.choices, default=Confidence.DECLARED
    )
    transaction = models.CharField(max_length=100, blank=True)
    weight = models.PositiveIntegerField(default=1)
    consumes = models.JSONField(default=list, blank=True)
    consumes_declared = models.BooleanField(
        default=False,
        help_text="Its declaration named `consumes` (even []): the list replaces the claims of "
        "the tasks it depends on, which it consumes otherwise.",
    )
    checks = models.JSONField(
        default=list, blank=True, help_text="Claims it exists to check: it may start on them."
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    ready = models.BooleanField(default=False, help_text="In the run's safe ready frontier.")
    released = models.BooleanField(
        default=False, help_text="A reviewer released its uncertain-dependency stop boundary."
    )
    refresh = models.JSONField(
        default=list,
        blank=True,
        help_text="Capabilities that came back whose state it reads: its next start re-reads them.",
    )
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="task_key_per_run")]
        indexes = [
            models.Index(fields=["run", "state"]),
            models.Index(fields=["run", "position"]),
            # A claim posted asks whether another task of its run is running: a handful of
            # rows, however many tasks the run has and whatever the statistics say.
            models.Index(fields=["run"], condition=Q(state="running"), name="running_tasks"),
            # An answer's region takes in the transaction groups of its tasks: each group's
            # members in one probe, not by reading the run's tasks.
            models.Index(
                fields=["run", "transaction"],
                condition=~Q(transaction=""),
                name="transaction_groups",
            ),
        ]

    def __str__(self) -> str:
        return self.key


class Prerequisite(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="prerequisite_links")
    requires = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="dependant_links")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "requires"], name="one_edge")]


class Attempt(models.Model):
    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="attempts")
    prompt_hash = models.CharField(max_length=200)
    context_hash = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, blank=True)
    failure_kind = models.CharField(max_length=20, blank=True)
    failure_signature = models.CharField(max_length=500, blank=True)
    failure_message = models.TextField(blank=True)
    failure_capability = models.CharField(max_length=100, blank=True)
    background_killed = models.JSONField(default=list, blank=True)
    resumable = models.BooleanField(default=False)
    reframed = models.BooleanField(default=False)
    rerouted = models.BooleanField(default=False)
    resumed = models.BooleanField(default=False)
    refreshed = models.JSONField(
        default=list, blank=True, help_text="Capabilities whose state it said it re-read."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "number"], name="attempt_number_per_task")
        ]
        ordering = ["task", "number"]


class Claim(models.Model):
    class Status(models.TextChoices):
        UNVERIFIED = "unverified"
        VERIFIED = "verified"
        REFUTED = "refuted"

    # No index of its own: (run, key) and (run, status) lead with it.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="claims", db_index=False)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="claims_posted")
    key = models.CharField(max_length=200)
    statement = models.TextField()
    load_bearing = models.BooleanField(default=True)
    # What it is about (table.column, file, URL, test id, config key); with its code spans.
    about = models.JSONField(default=list, blank=True)
    # Who posted it: agent:<name>, or reviewer:<user> for a reviewer's answer (on the task answered).
    posted_by = models.CharField(max_length=200, blank=True)
    sent_by = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="The orchestrator that sent it for `posted_by` (data.agent), if one did.",
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.UNVERIFIED)
    status_reason = models.CharField(max_length=500, blank=True)
    posted_at = models.DateTimeField()
    checked_at = models.DateTimeField(null=True, blank=True)
    checked_by = models.CharField(max_length=200, blank=True)
    verification_pending = models.BooleanField(default=False)
    raised_by = models.CharField(
        max_length=500,
        blank=True,
        help_text="Who made it load-bearing after its producer posted it as not: its consumers "
        "or a reviewer.",
    )
    superseded = models.BooleanField(
        default=False, help_text="A reviewer's answer took its key: nothing consumes it now."
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="claim_key_per_run")]
        indexes = [models.Index(fields=["run", "status"])]

    def __str__(self) -> str:
        return self.key


class Evidence(models.Model):
    """What a claim rests on, or what checked it: never another agent's text."""

    class Role(models.TextChoices):
        POSTED = "posted"
        CHECK = "check"
        REALITY = "reality"

    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="evidence")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.POSTED)
    kind = models.CharField(max_length=20)
    source = models.TextField()
    payload_hash = models.CharField(max_length=80)
    payload = models.JSONField(null=True, blank=True)
    datasource = models.CharField(max_length=100, blank=True)
    workspace = models.CharField(max_length=100, blank=True)
    submitted_by = models.CharField(max_length=200)
    sent_by = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="The orchestrator that sent it for `submitted_by` (data.agent), if one did.",
    )
    # The task it was posted or checked from (the producer's, or the checker's); None for reality.
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, null=True, blank=True, related_name="evidence_submitted"
    )
    verdict = models.CharField(max_length=10, blank=True)
    verdict_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "evidence"


class ClaimUse(models.Model):
    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="uses")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="claim_uses")
    at = models.DateTimeField()
    by_check = models.BooleanField(
        default=False, help_text="The task only read it to check it (claim.checked)."
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["claim", "task"], name="one_use_per_task")]


class Artifact(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="artifacts")
    kind = models.CharField(max_length=50)
    ref = models.CharField(max_length=500)
    url = models.URLField(blank=True, max_length=1000)
    created_at = models.DateTimeField()


class Blocker(models.Model):
    """Why a pending task is deferred, with when it was set and cleared (the checkpoint)."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="blockers")
    code = models.CharField(max_length=250)
    set_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["task"], condition=Q(cleared_at__isnull=True), name="open_blockers"
            ),
            # What a capability or a barrier defers (the capabilities board, the first page):
            # its open blockers, not every open blocker of every run.
            models.Index(
                fields=["code", "task"],
                condition=Q(cleared_at__isnull=True),
                name="open_blockers_by_code",
            ),
        ]


class Halt(models.Model):
    """A task was running on a claim when it was refuted: what it produced is held.

    Until the claim under `key` is verified again (or a reviewer's answer takes the key), the
    task's dependants carry `claim:<key>`, and so does the task itself if it is run again.
    """

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="halts")
    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="halts")
    key = models.CharField(max_length=200, help_text="The claim's key when it was refuted.")
    attempt = models.PositiveIntegerField(help_text="The attempt that was running on it.")
    reason = models.TextField()
    halted_at = models.DateTimeField()
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "claim"], name="one_halt_per_claim")]
        indexes = [
            models.Index(fields=["task"], condition=Q(settled_at__isnull=True), name="open_halts"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} halted on {self.key}"


class Hold(models.Model):
    """A person holds the task: placed when one of its escalations opens, lifted when handled.

    The desk places and lifts holds; the frontier reads them as `escalation:<id>` blockers, so
    the work needs nothing of the desk to know what waits for a person.
    """

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="holds")
    code = models.CharField(max_length=100)  # escalation:<id>
    placed_at = models.DateTimeField()
    lifted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "code"], name="one_hold_per_code")]
        indexes = [
            models.Index(fields=["task"], condition=Q(lifted_at__isnull=True), name="open_holds"),
        ]

    def __str__(self) -> str:
        return f"{self.code} on task {self.task_id}"


class Decision(models.Model):
    class Action(models.TextChoices):
        RETRY = "retry"
        REFRAME = "reframe"
        REROUTE = "reroute"
        ESCALATE = "escalate"
        RESUME = "resume"
        CARRY_ON = "carry_on"
        ABORT = "abort"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="decisions")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="decisions")
    attempt = models.ForeignKey(Attempt, null=True, blank=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=10, choices=Action.choices)
    reason = models.TextField()
    not_before = models.DateTimeField(null=True, blank=True)
    ground_truth = models.JSONField(default=list, blank=True)
    scope = models.TextField(blank=True)
    reroute_to = models.CharField(max_length=200, blank=True)
    trip_capability = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField()
    acted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["not_before"],
                condition=Q(acted_at__isnull=True),
                name="decisions_to_act_on",
            )
        ]


class ProgressLine(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="progress_lines")
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL)
    text = models.TextField()
    killed = models.JSONField(
        default=list, blank=True, help_text="Background work that was killed."
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]
