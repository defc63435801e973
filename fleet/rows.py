"""Model instances to and from rows in raw SQL, as the ORM would read and write them.

For a statement the ORM would spend longer compiling than the database running it (a lock taken
on every answer, say): `columns` names a model's columns in a SELECT, `instance` turns that
slice of a row back into the model, with the same converters the ORM applies (JSON, and on
SQLite dates, decimals and booleans). `add` writes one new instance, `insert` hundreds at once (a
batch's events and claims), on PostgreSQL with COPY; `copy` thousands of rows from plain values,
their keys left to the table.
"""

import json
from collections.abc import Callable, Iterable, Sequence
from functools import cache, partial
from typing import Any

from django.db import connections
from django.db.models import DateField, JSONField, Model, QuerySet
from django.db.models.fields import AutoFieldMixin
from psycopg.types.json import Jsonb

from fleet.prepared import prepared_cursor

Converter = Callable[[Any, Any, Any], Any]


@cache
def _fields(model: type[Model], alias: str) -> tuple[list[str], list[tuple[Any, list[Converter]]]]:
    connection = connections[alias]
    names, converters = [], []
    for field in model._meta.concrete_fields:
        names.append(str(field.attname))
        column = field.get_col(str(model._meta.db_table))
        found = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        converters.append((column, found))
    return names, converters


def columns(model: type[Model], table_alias: str, alias: str = "default") -> str:
    """`alias."column", ...` for every concrete field of `model`, in the order `instance` reads."""
    quote = connections[alias].ops.quote_name
    return ", ".join(
        f"{table_alias}.{quote(str(field.column))}" for field in model._meta.concrete_fields
    )


def width(model: type[Model]) -> int:
    """How many columns `columns` names."""
    return len(model._meta.concrete_fields)


def instance[M: Model](model: type[M], values: Sequence[Any], alias: str = "default") -> M | None:
    """The model from its columns' values (as `columns` named them); None when its primary key
    is NULL (a LEFT JOIN that found nothing)."""
    names, converters = _fields(model, alias)
    if values[names.index(model._meta.pk.attname)] is None:
        return None
    connection = connections[alias]
    converted = []
    for value, (column, found) in zip(values, converters, strict=True):
        for convert in found:
            value = convert(value, column, connection)
        converted.append(value)
    return model.from_db(alias, names, converted)


def one[M: Model](rows: QuerySet[M]) -> M | None:
    """The row a look-up by a unique key names (or the first of a few), None if there is none:
    `first()` without the ORDER BY id it adds, which a planner behind the table's growth may
    follow, reading the table in id order to find the one row its key index holds."""
    return next(iter(rows[:1]), None)


def new[M: Model](model: type[M], **values: Any) -> M:
    """`model(**values)` for values named by attname (`agent_id`, not `agent`), the fields'
    defaults for the rest, built the way the ORM builds rows it reads: a batch builds hundreds,
    and the keyword path resolves every field and relation of each."""
    args = [values.pop(name) if name in values else default() for name, default in _defaults(model)]
    if values:
        raise TypeError(f"{model.__name__} has no field {', '.join(sorted(values))}")
    return model(*args)


def add(obj: Model, alias: str = "default") -> None:
    """Store one new instance as `obj.save(force_insert=True)` would (signals aside).

    On PostgreSQL in one INSERT written once for its model, RETURNING the key the sequence gave
    it: an event writes a few rows, and the ORM spent longer compiling each INSERT than the
    database running it. Elsewhere, and for a key no sequence gives, the ORM's own `save`."""
    model = type(obj)
    connection = connections[alias]
    keyed = obj.pk is not None
    if connection.vendor != "postgresql" or not (
        keyed or isinstance(model._meta.pk, AutoFieldMixin)
    ):
        obj.save(force_insert=True, using=alias)
        return
    sql, fields = _insert_one(model, alias, keyed)
    # pre_save, as the ORM's INSERT: it stamps `auto_now` fields
    values = [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
    with prepared_cursor(alias) as cursor:  # its errors as Django's: IntegrityError, say
        cursor.execute(sql, values)
        if not keyed:
            obj.pk = cursor.fetchone()[0]
    obj._state.adding = False
    obj._state.db = alias


@cache
def _insert_one(model: type[Model], alias: str, keyed: bool) -> tuple[str, list[Any]]:
    quote = connections[alias].ops.quote_name
    pk = model._meta.pk
    fields = [field for field in model._meta.concrete_fields if keyed or field is not pk]
    names = ", ".join(quote(str(field.column)) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(str(model._meta.db_table))} ({names}) VALUES ({marks})"  # noqa: S608
    return (sql if keyed else f"{sql} RETURNING {quote(str(pk.column))}"), fields


@cache
def _defaults(model: type[Model]) -> list[tuple[str, Callable[[], Any]]]:
    return [(str(field.attname), field.get_default) for field in model._meta.concrete_fields]


def insert(objs: Sequence[Model], alias: str = "default") -> None:
    """Store new instances of one model as `bulk_create` would, each given its primary key.

    On PostgreSQL with COPY, the keys drawn from the table's sequence first: two statements,
    whatever the count, and no INSERT of hundreds of parameters for Django to compile and quote
    or for PostgreSQL to parse. Elsewhere, `bulk_create`. A field the ORM fills as it saves
    (`auto_now`) is not supported: its model is written with `bulk_create`."""
    if not objs:
        return
    model = type(objs[0])
    connection = connections[alias]
    if connection.vendor != "postgresql" or _needs_the_orm(model):
        model._default_manager.using(alias).bulk_create(objs)
        return
    fields = model._meta.concrete_fields
    pk = model._meta.pk
    new = [obj for obj in objs if obj.pk is None]
    # As the ORM's own statements: its errors (a key taken by a concurrent request) as Django's.
    with connection.wrap_database_errors, connection.cursor() as cursor:
        if new:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [str(model._meta.db_table), pk.column, len(new)],
            )
            for obj, (key,) in zip(new, cursor.fetchall(), strict=True):
                obj.pk = key
        attnames = [str(field.attname) for field in fields]
        copied(cursor, model, fields, ([obj.__dict__[a] for a in attnames] for obj in objs))
    for obj in objs:
        obj._state.adding = False
        obj._state.db = alias


def copy(
    model: type[Model],
    names: Sequence[str],
    values: Sequence[Sequence[Any]],
    alias: str = "default",
) -> None:
    """Store new rows of `model` from plain values of the fields `names` (attnames), in that
    order; the rest of each row, its key included, as the table's defaults give it.

    For thousands of rows whose keys nobody reads back (the blockers a capability going down
    sets): on PostgreSQL one COPY, with no instance built and no key drawn first. Elsewhere
    (and for a model the ORM must fill as it saves), `bulk_create`."""
    attnames = {str(field.attname): field for field in model._meta.concrete_fields}
    unknown = [name for name in names if name not in attnames]
    if unknown:
        raise ValueError(f"{model.__name__} has no column named {', '.join(unknown)} (attnames)")
    if not values:
        return
    connection = connections[alias]
    if connection.vendor != "postgresql" or _needs_the_orm(model):
        model._default_manager.using(alias).bulk_create(
            [model(**dict(zip(names, row, strict=True))) for row in values]
        )
        return
    # As the ORM's own statements: its errors as Django's.
    with connection.wrap_database_errors, connection.cursor() as cursor:
        copied(cursor, model, [attnames[name] for name in names], values)


def copied(
    cursor: Any, model: type[Model], fields: Sequence[Any], values: Iterable[Sequence[Any]]
) -> None:
    """One COPY of `values` (one row each, in the order of `fields`) into `model`'s table."""
    quote = cursor.db.ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in fields)
    dumps = [_dumper(field) for field in fields]
    with cursor.copy(f"COPY {quote(str(model._meta.db_table))} ({columns}) FROM STDIN") as out:
        for row in values:
            out.write_row(
                [
                    value if dump is None or value is None else dump(value)
                    for dump, value in zip(dumps, row, strict=True)
                ]
            )


def _needs_the_orm(model: type[Model]) -> bool:
    """A field the ORM fills as it saves, or a primary key no sequence gives."""
    return any(
        isinstance(field, DateField) and (field.auto_now or field.auto_now_add)
        for field in model._meta.concrete_fields
    ) or not isinstance(model._meta.pk, AutoFieldMixin)


def _dumper(field: Any) -> Callable[[Any], Any] | None:
    """How COPY is handed a field's value: JSON as jsonb (with the field's encoder), the rest
    as psycopg adapts it (text, numbers, booleans, times, UUIDs)."""
    if isinstance(field, JSONField):
        return partial(Jsonb, dumps=partial(json.dumps, cls=field.encoder))
    return None
