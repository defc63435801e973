"""fleet.prepared: the statements Bulkhead writes by hand for every answer are planned once per
connection, and are otherwise Django's (logged, counted, their errors Django's)."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from fleet.models import Fleet
from fleet.prepared import prepared_cursor

pytestmark = pytest.mark.django_db

FLEET_NAME = "SELECT name FROM fleet_fleet WHERE id = %(fleet)s"


def plans_of(statement: str) -> list[tuple[int, int]]:
    """(generic plans, custom plans) of each statement this connection has prepared like it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            [statement],
        )
        return cursor.fetchall()


@pytest.mark.postgres
def test_a_statement_is_prepared_and_planned_once_for_any_values():
    first, second = Fleet.objects.create(name="one"), Fleet.objects.create(name="two")

    names = []
    for fleet in (first, second, first):
        with prepared_cursor() as cursor:
            cursor.execute(FLEET_NAME, {"fleet": fleet.pk})
            names.append(cursor.fetchone()[0])

    assert names == ["one", "two", "one"]
    assert plans_of("SELECT name FROM fleet_fleet WHERE id = $1") == [(3, 0)]


@pytest.mark.postgres
def test_django_own_statements_are_never_prepared():
    fleet = Fleet.objects.create(name="one")

    for _ in range(6):
        Fleet.objects.filter(pk=fleet.pk).values_list("name", flat=True).get()

    assert plans_of('%FROM "fleet_fleet"%') == []


@pytest.mark.postgres
def test_a_list_is_one_value_whatever_its_length():
    """Bound apart from its text, a statement takes at most 65,535 values: a list is one."""
    fleet = Fleet.objects.create(name="one")
    ids = [fleet.pk, *range(10**9, 10**9 + 70_000)]

    with prepared_cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM fleet_fleet WHERE id = ANY(%(ids)s::bigint[])", {"ids": ids}
        )
        assert cursor.fetchone() == (1,)


def test_a_statement_is_logged_with_its_values_written_in():
    fleet = Fleet.objects.create(name="one")

    with CaptureQueriesContext(connection) as queries, prepared_cursor() as cursor:
        cursor.execute(FLEET_NAME, {"fleet": fleet.pk})

    assert [q["sql"] for q in queries.captured_queries] == [
        f"SELECT name FROM fleet_fleet WHERE id = {fleet.pk}"
    ]


def test_its_errors_are_djangos():
    Fleet.objects.create(name="one")
    Fleet.objects.create(name="two")

    with pytest.raises(IntegrityError), transaction.atomic(), prepared_cursor() as cursor:
        cursor.execute("UPDATE fleet_fleet SET name = %(name)s WHERE name = 'two'", {"name": "one"})

    assert sorted(Fleet.objects.values_list("name", flat=True)) == ["one", "two"]
