"""Template tags of the desk: the navigation, and small formats the pages share."""

import json
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from django import template
from django.core.serializers.json import DjangoJSONEncoder
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from escalations.selectors.waiting import shown_status
from fleet.access import FLEET_ROLES, manages_a_fleet, member_fleet_ids

register = template.Library()

# Stands for the id while a URL is reversed once: digits, as <int:...> wants, found nowhere else.
ID_STAND_IN = "8675309000000000001"


@register.simple_tag(takes_context=True)
def nav_link(context: template.Context, name: str, label: str) -> SafeString:
    """A link of the main navigation, marked as the current page where it is."""
    url = reverse(name)
    request = context.get("request")
    current = request is not None and request.path.startswith(url)
    if current:
        return format_html('<a href="{}" aria-current="page">{}</a>', url, label)
    return format_html('<a href="{}">{}</a>', url, label)


@lru_cache(maxsize=64)
def _around_id(name: str, urlconf: str | None, prefix: str) -> tuple[str, str] | None:
    head, *tail = reverse(name, urlconf=urlconf, args=[ID_STAND_IN]).split(ID_STAND_IN)
    return (head, tail[0]) if len(tail) == 1 else None


@register.simple_tag
def id_url(name: str, pk: int) -> str:
    """`{% url name pk %}` for a URL whose one argument is an id, reversed once per name.

    A queue page links every row three or four times; reversing each costs more than the rest
    of the row.
    """
    around = _around_id(name, get_urlconf(), get_script_prefix())
    if around is None:
        return reverse(name, args=[pk])
    return f"{around[0]}{int(pk)}{around[1]}"


@register.simple_tag(takes_context=True)
def is_manager(context: template.Context) -> bool:
    user = context.get("user")
    if user is None or not user.is_authenticated:
        return False
    return manages_a_fleet(user)


@register.simple_tag(takes_context=True)
def in_no_fleet(context: template.Context) -> bool:
    """Signed in, but a member of no fleet (a new superuser): every page is empty, and says why."""
    user = context.get("user")
    if user is None or not user.is_authenticated:
        return False
    roles = getattr(user, FLEET_ROLES, None)
    return not (roles if roles is not None else member_fleet_ids(user))


@register.filter
def claim_key(value: Any) -> str:
    """A claim's key as its agent named it: a refuted claim that a reviewer's answer replaced is
    kept under `<key>@refuted-<n>` so the answer can take its key; people read `<key>`."""
    key = str(value)
    head, at, tail = key.rpartition("@refuted-")
    return head if at and tail.isdigit() else key


@register.filter
def escalation_status(escalation: Any) -> str:
    """An escalation's status as people read it: a closed one says how it closed."""
    return shown_status(str(escalation.status), str(escalation.outcome or ""))


@register.filter
def replaced(value: Any) -> bool:
    """The claim was refuted and a reviewer's answer took its key (see `claim_key`)."""
    return claim_key(value) != str(value)


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
def ago(value: Any) -> str:
    """How long ago, in words: "just now" under a minute (not "0 minutes ago")."""
    if not isinstance(value, datetime):
        return ""
    if timezone.now() - value < timedelta(minutes=1):
        return "just now"
    return f"{timesince(value)} ago"


@register.filter(expects_localtime=True)
def isoformat(value: Any) -> str:
    """What `date:'c'` gives, without parsing a format for every row."""
    return value.isoformat() if isinstance(value, datetime) else ""


@register.filter(expects_localtime=True)
def timestamp(value: Any) -> str:
    """What `date:'Y-m-d H:i:s e'` gives (2026-12-02 09:00:00 UTC), without parsing a format."""
    if not isinstance(value, datetime):
        return ""
    v = value
    zone = v.tzname() or ""
    return f"{v.year:04}-{v.month:02}-{v.day:02} {v.hour:02}:{v.minute:02}:{v.second:02} {zone}"


@register.filter
def json_data(value: Any, element_id: str) -> SafeString:
    """What `json_script` gives, its three escapes made with `str.replace`: `str.translate`
    walks the JSON a character at a time, milliseconds on a large run's graph."""
    escaped = (
        json.dumps(value, cls=DjangoJSONEncoder)
        .replace(">", "\\u003E")
        .replace("<", "\\u003C")
        .replace("&", "\\u0026")
    )
    safe = mark_safe(escaped)  # noqa: S308 - escaped as json_script escapes
    return format_html('<script id="{}" type="application/json">{}</script>', element_id, safe)


@register.filter
def minutes(value: Any) -> str:
    """Minutes with one decimal, as blast radius reports them."""
    if value is None or value == "":
        return "—"
    value = float(value)
    if value < 120:
        return f"{value:.1f} min"
    return f"{value:,.0f} min ({age(timedelta(minutes=value))})"  # 265,367 min is "184d 6h"


UNKNOWN_NOTE = ' <small class="muted">(unknown: nobody has reported on it)</small>'


@register.simple_tag(takes_context=True)
def task_row(context: template.Context, t: dict[str, Any]) -> SafeString:
    """A row of the run page's task table. A run has thousands of tasks and a template costs
    about a tenth of a millisecond a row, so the common row is built here; a row with notes or
    actions renders partials/task_row.html, which gives the same markup for a common row (a
    test compares the two)."""
    if t["notes"] or t["more"]:
        assert context.template is not None  # a tag is rendered within a template
        partial = context.template.engine.get_template("escalations/partials/task_row.html")
        with context.push(t=t):
            return partial.render(context)
    return mark_safe(common_row(t))  # noqa: S308 - every value below is escaped


def common_row(t: dict[str, Any]) -> str:
    title = f' <small class="muted">{escape(t["title"])}</small>' if t["title"] else ""
    blocks = "".join(
        f'<code class="blocker">{escape(b)}</code>{UNKNOWN_NOTE if unknown else ""} '
        for b, unknown in t["blocks"]
    )
    shown = escape(t["shown"])
    return (
        f'\n      <tr id="{escape(t["anchor"])}"><td class="key"><strong>{escape(t["key"])}</strong>'
        f'{title}</td><td data-label="Agent" class="key">{escape(t["agent"])}</td>\n'
        f'        <td data-label="State"><span class="badge badge-{shown}">{shown}</span></td>\n'
        f'        <td data-label="Blockers">{blocks or "—"}</td>\n'
        f'        <td data-label="After" class="key">{escape(t["after"])}</td></tr>\n'
    )
