"""Several writes of one transaction as one statement on PostgreSQL (a data-modifying WITH);
elsewhere (SQLite) one after the other, with the same result.

Each write is an `Insert` of model instances (their primary keys are set, as `bulk_create`
does) or an `Update` of a queryset. A later insert may name an earlier one's row with
`Inserted(insert)` as a field's value (its one row's primary key). All of them see the database
as it was before the statement (PostgreSQL's rule for WITH): no two may touch the same row, and
none reads what another writes, besides its `Inserted` key.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from django.core.exceptions import EmptyResultSet
from django.db import connections, router
from django.db.models import Model, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.sql import UpdateQuery


@dataclass
class Insert:
    objs: Sequence[Model]


@dataclass
class Update:
    queryset: QuerySet[Any]
    values: dict[str, Any] = field(default_factory=dict)


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
    alias = router.db_for_write(
        type(first.objs[0]) if isinstance(first, Insert) else first.queryset.model
    )
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
            write.queryset.using(alias).update(**write.values)


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
    query = cast(UpdateQuery, write.queryset.query.chain(UpdateQuery))
    query.add_update_values(write.values)
    query.annotations = {}
    compiler = query.get_compiler(alias)
    compiler.pre_sql_setup()
    sql, params = compiler.as_sql()
    if not sql:
        raise EmptyResultSet
    return sql, params


def saved(obj: Model, pk: Any, alias: str) -> None:
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = alias
