"""Admin for the work: runs with their tasks, attempts, claims and evidence, decisions."""

from django.contrib import admin

from runs.claims.by_hand import check_by_hand
from runs.models import (
    Artifact,
    Attempt,
    Blocker,
    Claim,
    ClaimUse,
    Decision,
    Evidence,
    Prerequisite,
    ProgressLine,
    Run,
    Task,
)


class TaskInline(admin.TabularInline):
    model = Task
    extra = 0
    fields = ("key", "agent", "state", "ready", "effect", "capabilities")
    readonly_fields = fields
    show_change_link = True
    max_num = 0


class ProgressInline(admin.TabularInline):
    model = ProgressLine
    extra = 0
    fields = ("created_at", "task", "text")
    readonly_fields = fields


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("key", "fleet", "title", "policy", "state", "started_at", "imported")
    list_filter = ("fleet", "state", "policy", "imported")
    search_fields = ("key", "title")
    inlines = [TaskInline, ProgressInline]


class BlockerInline(admin.TabularInline):
    model = Blocker
    extra = 0
    readonly_fields = ("code", "set_at", "cleared_at")


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    fields = (
        "number",
        "agent",
        "outcome",
        "failure_kind",
        "failure_signature",
        "reframed",
        "rerouted",
        "resumed",
    )
    readonly_fields = fields


class PrerequisiteInline(admin.TabularInline):
    model = Prerequisite
    fk_name = "task"
    extra = 0
    raw_id_fields = ("requires",)


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("key", "run", "agent", "state", "ready", "effect")
    list_filter = ("state", "ready", "effect", "run__fleet")
    search_fields = ("key", "title", "run__key")
    raw_id_fields = ("run", "agent")
    inlines = [PrerequisiteInline, AttemptInline, BlockerInline]


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin):
    list_display = (
        "task",
        "number",
        "agent",
        "outcome",
        "failure_kind",
        "started_at",
        "finished_at",
    )
    list_filter = ("outcome", "failure_kind")
    raw_id_fields = ("task", "agent")


class EvidenceInline(admin.StackedInline):
    model = Evidence
    extra = 0


@admin.action(description="Verify by hand (recorded as a reviewer's human answer)")
def verify_by_hand(modeladmin, request, queryset):  # type: ignore[no-untyped-def]
    for claim in queryset:
        check_by_hand(
            claim=claim, reviewer=request.user, verdict="verified", note="verified in the admin"
        )


@admin.action(description="Refute by hand (recorded as a reviewer's human answer)")
def refute_by_hand(modeladmin, request, queryset):  # type: ignore[no-untyped-def]
    for claim in queryset:
        check_by_hand(
            claim=claim, reviewer=request.user, verdict="refuted", note="refuted in the admin"
        )


@admin.register(Claim)
class ClaimAdmin(admin.ModelAdmin):
    list_display = ("key", "run", "task", "status", "load_bearing", "posted_at", "checked_at")
    list_filter = ("status", "load_bearing", "run__fleet")
    search_fields = ("key", "statement")
    raw_id_fields = ("run", "task")
    inlines = [EvidenceInline]
    actions = [verify_by_hand, refute_by_hand]


@admin.register(ClaimUse)
class ClaimUseAdmin(admin.ModelAdmin):
    list_display = ("claim", "task", "at")
    raw_id_fields = ("claim", "task")


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    list_display = ("kind", "ref", "task", "created_at")
    raw_id_fields = ("task",)


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin):
    list_display = ("task", "action", "reason", "not_before", "created_at", "acted_at")
    list_filter = ("action",)
    raw_id_fields = ("run", "task", "attempt")


@admin.register(Blocker)
class BlockerAdmin(admin.ModelAdmin):
    list_display = ("task", "code", "set_at", "cleared_at")
    raw_id_fields = ("task",)


@admin.register(ProgressLine)
class ProgressLineAdmin(admin.ModelAdmin):
    list_display = ("run", "task", "text", "created_at")
    raw_id_fields = ("run", "task")
