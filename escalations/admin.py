"""Admin for the desk: packets, escalations, answers."""

from django.contrib import admin

from escalations.models import Answer, Escalation, FailurePacket


@admin.register(FailurePacket)
class FailurePacketAdmin(admin.ModelAdmin):
    list_display = ("smallest_unblocking_question", "task", "agent", "submitted_at")
    raw_id_fields = ("task", "agent")


@admin.register(Escalation)
class EscalationAdmin(admin.ModelAdmin):
    list_display = ("pk", "task", "run", "fleet", "status", "opened_at", "claimed_by")
    list_filter = ("fleet", "status")
    raw_id_fields = ("run", "task", "packet")


@admin.register(Answer)
class AnswerAdmin(admin.ModelAdmin):
    list_display = ("escalation", "reviewer", "answered_at")
    raw_id_fields = ("escalation",)
