"""A cursor for the statements Bulkhead writes by hand and sends on every event and answer:
PostgreSQL parses and plans each of them once per connection, not on every call.

Django writes a statement's values into its text (client-side binding), so PostgreSQL parses
and plans every statement it is sent, however often it has seen the same one. Through this
cursor the values travel apart from the text (server-side binding) and the statement is prepared
on its connection the first time it is sent (`prepare_threshold` in the settings; Django's own
cursors never prepare anything), with one plan for any values (`plan_cache_mode`, also there):
write only statements whose plan cannot depend on them, an index probe per id. A list is one parameter (an array), whatever its length, so a
statement written for it takes any number of ids; a statement must cast what PostgreSQL cannot
infer (`%(ids)s::bigint[]`). Elsewhere (SQLite) it is Django's own cursor.

Statements through it are Django's as much as any: logged (with their values written in, as
Django logs its own), counted by `CaptureQueriesContext`, and their errors Django's
(`IntegrityError`, say).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper


@contextmanager
def prepared_cursor(alias: str = "default") -> Iterator[Any]:
    """Django's cursor of the connection `alias`, binding on the server (on PostgreSQL)."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        raw: Any = ServerBindingCursor(connection.connection)  # type: ignore[call-arg]
    wrapped = (
        LoggedAsWritten(raw, connection)
        if connection.queries_logged
        else connection.make_cursor(raw)
    )
    with wrapped as cursor:
        yield cursor


class LoggedAsWritten(CursorDebugWrapper):
    """Django's logging cursor, the statement logged with its values written into its text (what
    Django logs of its own cursors, and what one can run again), not apart from it."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(self.db.ops.compose_sql(sql, params)):
            return CursorWrapper.execute(self, sql, params)
