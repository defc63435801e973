"""Model instances from rows read in raw SQL, as the ORM would build them.

For a statement the ORM would spend longer compiling than the database running it (a lock taken
on every answer, say): `columns` names a model's columns in a SELECT, `instance` turns that
slice of a row back into the model, with the same converters the ORM applies (JSON, and on
SQLite dates, decimals and booleans).
"""

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from django.db import connections
from django.db.models import Model

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
