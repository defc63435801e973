"""Admin for the fleet: agents with their keys and tokens, capabilities, sources, events, deliveries."""

from django.contrib import admin

from fleet.models import (
    Agent,
    ApiToken,
    Capability,
    Delivery,
    DeliveryAttempt,
    Event,
    Fleet,
    Membership,
    SigningKey,
    VerificationSource,
)


class CapabilityInline(admin.TabularInline):
    model = Capability
    extra = 0
    fields = ("name", "status", "role", "reason", "changed_at")
    readonly_fields = ("changed_at",)


class SourceInline(admin.TabularInline):
    model = VerificationSource
    extra = 0


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Fleet)
class FleetAdmin(admin.ModelAdmin):
    list_display = ("name", "callback_url", "callback_disabled_at", "created_at")
    search_fields = ("name",)
    inlines = [CapabilityInline, SourceInline, MembershipInline]
    readonly_fields = ("callback_secret",)


class SigningKeyInline(admin.TabularInline):
    model = SigningKey
    extra = 0
    fields = ("active", "created_at", "revoked_at")
    readonly_fields = ("created_at",)


class ApiTokenInline(admin.TabularInline):
    model = ApiToken
    extra = 0
    fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "last_used_at")


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("name", "fleet", "role", "is_orchestrator", "is_tool", "id")
    list_filter = ("fleet", "is_orchestrator", "is_tool")
    search_fields = ("name", "id")
    inlines = [SigningKeyInline, ApiTokenInline]


@admin.register(Capability)
class CapabilityAdmin(admin.ModelAdmin):
    list_display = ("name", "fleet", "status", "role", "reason", "changed_at")
    list_filter = ("fleet", "status", "role")


@admin.register(VerificationSource)
class VerificationSourceAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "fleet", "value")
    list_filter = ("fleet", "kind")


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "fleet", "role")
    list_filter = ("fleet", "role")


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    """Read-only: the record of applied events is append-only."""

    list_display = ("type", "agent", "fleet", "webhook_id", "occurred_at", "received_at")
    list_filter = ("fleet", "type")
    search_fields = ("webhook_id",)
    date_hierarchy = "received_at"

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    readonly_fields = ("at", "status_code", "error", "duration_ms")


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = (
        "type",
        "fleet",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "created_at",
    )
    list_filter = ("fleet", "status", "type")
    search_fields = ("webhook_id",)
    inlines = [DeliveryAttemptInline]
