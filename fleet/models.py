"""The fleet: agents and their keys, capabilities, verification sources, the event log, the outbox."""

import hashlib
import secrets
import uuid
from base64 import b64encode

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


def new_signing_secret() -> str:
    return "whsec_" + b64encode(secrets.token_bytes(32)).decode()


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Fleet(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    callback_url = models.URLField(blank=True, max_length=500)
    callback_secret = models.CharField(max_length=100, default=new_signing_secret)
    callback_disabled_at = models.DateTimeField(null=True, blank=True)
    callback_disabled_reason = models.CharField(max_length=300, blank=True)
    retry_budget = models.PositiveIntegerField(
        default=50, help_text="Retries the fleet may spend per hour, across all its tasks."
    )
    unnamed_roles_stop = models.BooleanField(
        default=False,
        help_text="While the fleet names no authority, observability or rollback capability, "
        "each external effect waits for a reviewer's release.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Agent(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=100, blank=True)
    is_orchestrator = models.BooleanField(default=False)
    is_tool = models.BooleanField(
        default=False, help_text="A deterministic tool registered for its role: a reroute target."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["fleet", "name"], name="agent_name_per_fleet")
        ]

    def __str__(self) -> str:
        return f"{self.fleet.name}/{self.name}"


class SigningKey(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="signing_keys")
    secret = models.CharField(max_length=100, default=new_signing_secret)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"key {self.pk} of {self.agent}"


class ApiToken(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="api_tokens")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    @classmethod
    def issue(cls, agent: Agent) -> tuple["ApiToken", str]:
        """Create a token; the plain value is returned once and only its digest is stored."""
        plain = "bhk_" + secrets.token_urlsafe(32)
        token = cls.objects.create(agent=agent, digest=token_digest(plain), prefix=plain[:12])
        return token, plain

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.agent})"


class Capability(models.Model):
    class Status(models.TextChoices):
        UP = "up"
        DOWN = "down"
        UNKNOWN = "unknown"  # named by a task, never reported on: not up

    class Role(models.TextChoices):
        AUTHORITY = "authority"
        OBSERVABILITY = "observability"
        ROLLBACK = "rollback"

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="capabilities")
    name = models.CharField(max_length=100)
    status = models.CharField(max_length=7, choices=Status.choices, default=Status.UNKNOWN)
    role = models.CharField(max_length=20, choices=Role.choices, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    changed_at = models.DateTimeField(auto_now_add=True)
    changed_by = models.CharField(max_length=150, blank=True)

    class Meta:
        verbose_name_plural = "capabilities"
        constraints = [
            models.UniqueConstraint(fields=["fleet", "name"], name="capability_name_per_fleet"),
            models.UniqueConstraint(
                fields=["fleet", "role"], condition=~Q(role=""), name="one_capability_per_role"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class VerificationSource(models.Model):
    class Kind(models.TextChoices):
        DATASOURCE = "datasource"
        WORKSPACE = "workspace"
        HOST = "host"
        COMMAND = "command"

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="sources")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    name = models.CharField(max_length=100)
    value = models.CharField(
        max_length=1000, help_text="A DSN, a directory, a host name or a command line."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["fleet", "kind", "name"], name="source_per_fleet")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class OneTimePassword(models.Model):
    """A password member_add printed: it opens one session, which must set the user's own."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="one_time_password"
    )
    issued_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True, help_text="When it signed in (once).")


class Membership(models.Model):
    class Role(models.TextChoices):
        REVIEWER = "reviewer"
        MANAGER = "manager"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "fleet"], name="one_membership_per_fleet")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.fleet}"


class Event(models.Model):
    """An applied webhook event: append-only, and the idempotency record for its webhook-id."""

    # No index of their own: (fleet, received_at) and (agent, webhook_id) lead with them.
    fleet = models.ForeignKey(
        Fleet, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    agent = models.ForeignKey(
        Agent, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    webhook_id = models.CharField(max_length=200)
    body_sha256 = models.CharField(max_length=64)
    type = models.CharField(max_length=40)
    data = models.JSONField()
    occurred_at = models.DateTimeField()
    received_at = models.DateTimeField(default=timezone.now)
    response_status = models.PositiveSmallIntegerField()
    response = models.JSONField(help_text="The reply's body but its `event` (this row's id).")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "webhook_id"], name="one_event_per_webhook_id")
        ]
        indexes = [models.Index(fields=["fleet", "received_at"])]

    def save(self, *args: object, **kwargs: object) -> None:
        if self.pk is not None and not kwargs.get("force_insert"):
            raise ValueError("events are append-only")
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.type} {self.webhook_id}"


class Delivery(models.Model):
    """An outbound notification, written in the transaction of the change it reports (the outbox)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"
        DISABLED = "disabled"

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="deliveries")
    webhook_id = models.CharField(max_length=40, unique=True)
    type = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"]),
            models.Index(fields=["fleet", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.webhook_id} ({self.status})"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="log")
    at = models.DateTimeField(auto_now_add=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
