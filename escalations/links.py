"""Signed, expiring links to a packet page, for the messages that announce an escalation.

A link names the escalation and is signed with the site's key (`django.core.signing`, its own
salt); it expires after `ESCALATION_LINK_MAX_AGE_SECONDS` and opens the packet page only for a
signed-in member of the escalation's fleet, like any other link to it.
"""

from django.conf import settings
from django.core import signing
from django.urls import reverse

SALT = "bulkhead.escalation-link"


class LinkRefused(Exception):
    """An expired or tampered link: `expired` says which."""

    def __init__(self, expired: bool) -> None:
        super().__init__("expired" if expired else "bad signature")
        self.expired = expired


def max_age() -> int:
    return int(getattr(settings, "ESCALATION_LINK_MAX_AGE_SECONDS", 7 * 24 * 3600))


def lifetime() -> str:
    """How long a link opens its escalation, in words: "7 days", "1 hour", "1 day 12 hours"."""
    left = max_age()
    parts = []
    for unit, seconds in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, left = divmod(left, seconds)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts) or "0 seconds"


def token_for(escalation_id: int) -> str:
    return signing.dumps({"e": escalation_id}, salt=SALT, compress=False)


def link_for(escalation_id: int) -> str:
    return settings.SITE_URL.rstrip("/") + reverse(
        "escalation-link", args=[token_for(escalation_id)]
    )


def escalation_of(token: str) -> int:
    """The escalation a link names; raises LinkRefused when it has expired or was altered."""
    try:
        value = signing.loads(token, salt=SALT, max_age=max_age())
    except signing.SignatureExpired:
        raise LinkRefused(expired=True) from None
    except signing.BadSignature:
        raise LinkRefused(expired=False) from None
    if not isinstance(value, dict) or not isinstance(value.get("e"), int):
        raise LinkRefused(expired=False)
    return int(value["e"])
