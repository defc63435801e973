"""Several writes of one transaction as one statement on PostgreSQL (a data-modifying WITH);
elsewhere (SQLite) one after the other, with the same result.

Each write is an `Insert` of model instances (their primary keys are set, as `bulk_create`
does) or an `Update` of the rows of a model that match a few lookups. A later insert may name
an earlier one's row with `Inserted(insert)` as a field's value (its one row's primary key). All
of them see the database as it was before the statement (PostgreSQL's rule for WITH): no two may
touch the same row, and none reads what another writes, besides its `Inserted` key.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections, router
from django.db.models import Field, Model
from django.db.models.expressions import RawSQL


@dataclass
class Insert:
    objs: Sequence[Model]


@dataclass
class Update:
    """`model.objects.filter(**where).update(**values)`, where each lookup is a field (or `pk`)
    equal to a value, `__in` a list, or `__isnull`."""

    model: type[Model]
    where: dict[str, Any]
    values: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for lookup in self.where:
            if lookup.partition("__")[2] not in ("", "in", "isnull"):
                raise ValueError(f"Update takes a field, __in and __isnull, not {lookup!r}")


@dataclass(frozen=True)
class Inserted:
    """The primary key of the one row an earlier `Insert` of the same call writes."""

    insert: Insert


def together(*writes: Insert | Update) -> None:
    """Carry out the writes, in one statement where the database allows it."""
    writes = tuple(w for w in writes if not (isinstance(w, Insert) and not w.objs))
    if not writes:
        return
    first = writes[0]
    alias = router.db_for_write(type(first.objs[0]) if isinstance(first, Insert) else first.model)
    connection = connections[alias]
    if connection.vendor != "postgresql" or len(writes) == 1:
        one_by_one(writes, alias)
        return
    names = {id(w): f"w{i}" for i, w in enumerate(writes)}
    parts, params, inserts = [], [], []
    for write in writes:
        name = names[id(write)]
        if isinstance(write, Insert):
            # The names are ours (w0, w1, ...): nothing of the caller's is spliced in.
            refer(write, lambda ref: RawSQL(f'(SELECT "pk" FROM {names[id(ref)]})', ()))  # noqa: S611, S608
            sql, args = insert_sql(write, alias)
            inserts.append((name, write))
        else:
            try:
                sql, args = update_sql(write, alias)
            except EmptyResultSet:
                continue
        parts.append(f"{name} AS ({sql})")
        params += list(args)
    selected = [f'(SELECT array_agg("pk") FROM {n})' for n, _ in inserts] or ["1"]  # noqa: S608
    statement = f"WITH {', '.join(parts)} SELECT {', '.join(selected)}"
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    for (_, write), pks in zip(inserts, row, strict=False):
        for obj, pk in zip(write.objs, pks or (), strict=True):
            saved(obj, pk, alias)


def one_by_one(writes: Sequence[Insert | Update], alias: str) -> None:
    for write in writes:
        if isinstance(write, Insert):
            refer(write, lambda ref: ref.objs[0].pk)
            model = type(write.objs[0])
            model._base_manager.using(alias).bulk_create(list(write.objs))
        else:
            write.model._base_manager.using(alias).filter(**write.where).update(**write.values)


def refer(write: Insert, to: Any) -> None:
    for obj in write.objs:
        for f in obj._meta.concrete_fields:
            value = getattr(obj, f.attname, None)
            if isinstance(value, Inserted):
                setattr(obj, f.attname, to(value.insert))


def insert_sql(write: Insert, alias: str) -> tuple[str, Sequence[Any]]:
    """One multi-row INSERT of the objects, each value prepared as the ORM's INSERT prepares it
    (`pre_save`, then `get_db_prep_save`); an `Inserted` key's subquery (`refer`) spliced in.
    Written out, not compiled by the ORM's InsertQuery: an answer's inserts spent longer there
    than in the database."""
    model = type(write.objs[0])
    opts = model._meta
    connection = connections[alias]
    quote = connection.ops.quote_name
    fields = [f for f in opts.concrete_fields if not f.generated and f is not opts.pk]
    rows, params = [], []
    for obj in write.objs:
        marks = []
        for f in fields:
            value = f.pre_save(obj, True)
            if isinstance(value, RawSQL):
                marks.append(value.sql)
                params += list(value.params)
            else:
                marks.append("%s")
                params.append(f.get_db_prep_save(value, connection))
        rows.append(f"({', '.join(marks)})")
    columns = ", ".join(quote(str(f.column)) for f in fields)
    table = quote(str(opts.db_table))
    sql = f"INSERT INTO {table} ({columns}) VALUES {', '.join(rows)}"  # noqa: S608
    return f'{sql} RETURNING {quote(str(opts.pk.column))} AS "pk"', params


def update_sql(write: Update, alias: str) -> tuple[str, Sequence[Any]]:
    """The UPDATE, each value prepared as the ORM's UPDATE prepares it (`get_db_prep_save`, a
    model instance by its key); `EmptyResultSet` when an `__in` list is empty. Written out, not
    compiled by the ORM's UpdateQuery: building and compiling an answer's updates took longer
    than the database took to run them."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    sets, params = [], []
    for name, value in write.values.items():
        target = concrete(write.model, name)
        sets.append(f"{quote(str(target.column))} = %s")
        params.append(target.get_db_prep_save(key_of(value), connection))
    conditions = []
    for lookup, value in write.where.items():
        name, _, operator = lookup.partition("__")
        target = concrete(write.model, name)
        column = quote(str(target.column))
        if operator == "isnull":
            conditions.append(f"{column} IS {'' if value else 'NOT '}NULL")
        elif operator == "in":
            values = [target.get_db_prep_value(key_of(v), connection) for v in value]
            if not values:
                raise EmptyResultSet
            conditions.append(f"{column} IN ({', '.join(['%s'] * len(values))})")
            params += values
        elif value is None:  # as the ORM reads `field=None`
            conditions.append(f"{column} IS NULL")
        else:
            conditions.append(f"{column} = %s")
            params.append(target.get_db_prep_value(key_of(value), connection))
    where = " AND ".join(conditions) or "TRUE"
    table = quote(str(write.model._meta.db_table))
    return f"UPDATE {table} SET {', '.join(sets)} WHERE {where}", params  # noqa: S608


def concrete(model: type[Model], name: str) -> "Field[Any, Any]":
    found = model._meta.pk if name == "pk" else model._meta.get_field(name)
    if not isinstance(found, Field) or not found.concrete:
        raise ValueError(f"{model.__name__} has no column {name!r}")
    return found


def key_of(value: Any) -> Any:
    return value.pk if isinstance(value, Model) else value


def saved(obj: Model, pk: Any, alias: str) -> None:
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = alias
