"""Template tags of the desk: the navigation, and small formats the pages share."""

from datetime import timedelta
from typing import Any

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from fleet.models import Membership

register = template.Library()


@register.simple_tag(takes_context=True)
def nav_link(context: template.Context, name: str, label: str) -> SafeString:
    """A link of the main navigation, marked as the current page where it is."""
    url = reverse(name)
    request = context.get("request")
    current = request is not None and request.path.startswith(url)
    if current:
        return format_html('<a href="{}" aria-current="page">{}</a>', url, label)
    return format_html('<a href="{}">{}</a>', url, label)


@register.simple_tag(takes_context=True)
def is_manager(context: template.Context) -> bool:
    user = context.get("user")
    if user is None or not user.is_authenticated:
        return False
    return Membership.objects.filter(user_id=user.pk, role=Membership.Role.MANAGER).exists()


@register.filter
def age(value: Any) -> str:
    """A duration as a reviewer reads it: 45s, 12m, 3h 5m, 2d 4h."""
    if not isinstance(value, timedelta):
        return ""
    seconds = max(0, int(value.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


@register.filter
def minutes(value: Any) -> str:
    """Minutes with one decimal, as blast radius reports them."""
    if value is None or value == "":
        return "—"
    return f"{float(value):.1f} min"
