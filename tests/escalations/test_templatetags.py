"""The desk's template tags and filters write what Django's own would, only cheaper."""

import zoneinfo
from datetime import UTC, datetime

import pytest
from django.template import Context, Template
from django.urls import get_script_prefix, reverse, set_script_prefix
from django.utils import timezone


@pytest.fixture
def script_prefix():
    previous = get_script_prefix()
    yield set_script_prefix
    set_script_prefix(previous)


def rendered(source: str, **context) -> str:
    return Template("{% load desk %}" + source).render(Context(context))


@pytest.mark.parametrize("name", ["packet", "claim", "release", "run"])
@pytest.mark.parametrize("pk", [1, 42, 1234567, 9_007_199_254_740_993])
def test_an_id_url_is_the_url_django_reverses(name, pk):
    assert rendered("{% id_url name pk %}", name=name, pk=pk) == reverse(name, args=[pk])


def test_an_id_url_follows_the_script_prefix(script_prefix):
    script_prefix("/bulkhead/")
    assert rendered("{% id_url 'claim' 7 %}") == "/bulkhead/escalations/7/claim/"
    script_prefix("/")
    assert rendered("{% id_url 'claim' 7 %}") == "/escalations/7/claim/"


@pytest.mark.parametrize(
    "at",
    [
        datetime(2026, 12, 2, 9, 0, tzinfo=UTC),
        datetime(2026, 6, 2, 23, 59, 58, 3043, tzinfo=UTC),
        datetime(987, 1, 2, 3, 4, 5, tzinfo=UTC),
    ],
)
@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/St_Johns"])
def test_the_time_filters_write_what_the_date_filter_writes(at, zone):
    with timezone.override(zoneinfo.ZoneInfo(zone)):
        ours = rendered("{{ at|isoformat }}|{{ at|timestamp }}", at=at)
        django = rendered("{{ at|date:'c' }}|{{ at|date:'Y-m-d H:i:s e' }}", at=at)
    assert ours == django
    assert rendered("{{ nothing|isoformat }}{{ nothing|timestamp }}", nothing=None) == ""


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "—"), (2, "2.0 min"), (40.04, "40.0 min"), (265367.0, "265,367 min (184d 6h)")],
)
def test_minutes_stay_minutes_and_long_ones_say_how_long_that_is(value, shown):
    from escalations.templatetags.desk import minutes

    assert minutes(value) == shown


ROWS = [
    {"title": 'Plan <the> "rules" & more', "blocks": [("capability:forge", False)]},
    {"title": "", "blocks": [("capability:db", True), ("prerequisite:a<b", False)]},
    {"title": "t", "blocks": []},
]


@pytest.mark.parametrize("fields", ROWS)
def test_the_common_task_row_is_the_markup_its_partial_gives(fields):
    from django.template.loader import get_template

    from escalations.templatetags.desk import common_row

    row = {
        "anchor": "task-a&b", "key": "a&b", "agent": "coder", "shown": "pending",
        "after": "x, <y>", "notes": False, "more": False, **fields,
    }  # fmt: skip
    assert common_row(row) == get_template("escalations/partials/task_row.html").render({"t": row})
    assert "&lt;" in common_row(row) and "<y>" not in common_row(row)
