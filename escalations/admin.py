"""Admin for the desk: packets, escalations, answers."""

from django.contrib import admin

from escalations.models import (
    Answer,
    Assignment,
    Channel,
    DueRule,
    Escalation,
    EscalationStep,
    FailurePacket,
    Message,
    Pool,
    PoolMember,
    RoutingRule,
)


@admin.register(FailurePacket)
class FailurePacketAdmin(admin.ModelAdmin):
    list_display = ("smallest_unblocking_question", "task", "agent", "submitted_at")
    raw_id_fields = ("task", "agent")


@admin.register(Escalation)
class EscalationAdmin(admin.ModelAdmin):
    list_display = ("pk", "task", "run", "fleet", "status", "opened_at", "assignee", "due_at")
    list_filter = ("fleet", "status")
    raw_id_fields = ("run", "task", "packet")


@admin.register(Answer)
class AnswerAdmin(admin.ModelAdmin):
    list_display = ("escalation", "reviewer", "answered_at")
    raw_id_fields = ("escalation",)


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    list_display = ("pk", "fleet", "user", "kind", "created_at")
    list_filter = ("kind",)


class PoolMemberInline(admin.TabularInline):
    model = PoolMember
    extra = 0


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ("name", "fleet")
    inlines = [PoolMemberInline]


@admin.register(RoutingRule)
class RoutingRuleAdmin(admin.ModelAdmin):
    list_display = ("fleet", "position", "pool", "next_pool", "agent_role", "capability", "run")


@admin.register(DueRule)
class DueRuleAdmin(admin.ModelAdmin):
    list_display = ("fleet", "failure_kind", "urgency", "minutes")


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
    list_display = ("escalation", "kind", "at", "tier", "to_user", "by_user")
    raw_id_fields = ("escalation",)


@admin.register(EscalationStep)
class EscalationStepAdmin(admin.ModelAdmin):
    list_display = ("escalation", "kind", "tier", "due_at", "done_at")
    raw_id_fields = ("escalation",)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("pk", "escalation", "kind", "reason", "status", "attempts", "created_at")
    list_filter = ("status", "kind", "reason")
    raw_id_fields = ("escalation", "channel")
