"""What PostgreSQL's plan for a statement read: for the tests that a look-up reads the rows it
names, not a table's, however far the table has grown since its statistics were last taken."""

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, cast

from django.db import connection, transaction
from django.db.backends.postgresql.base import ServerBindingCursor
from django.test.utils import CaptureQueriesContext


def rows_read(sql: str) -> int:
    """The most rows any step of the statement's plan read (kept or filtered out)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        (plan,) = cursor.fetchone()
    plan = plan if isinstance(plan, list) else json.loads(plan)

    def steps(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from steps(child)

    return max(
        (step["Actual Rows"] + step.get("Rows Removed by Filter", 0)) * step["Actual Loops"]
        for step in steps(plan[0]["Plan"])
    )


class CaptureStatements(CaptureQueriesContext):
    """`CaptureQueriesContext`, and in `prepared` each statement sent through `fleet.prepared`
    as it was sent: its text with placeholders, and its values."""

    def __enter__(self) -> "CaptureStatements":
        self.prepared: list[tuple[str, Any]] = []
        self.wrapping = self.connection.execute_wrapper(self.seen)
        self.wrapping.__enter__()
        return cast("CaptureStatements", super().__enter__())

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self.wrapping.__exit__(*exc)

    def seen(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if isinstance(context["cursor"].cursor, ServerBindingCursor):
            self.prepared.append((sql, params))
        return execute(sql, params, many, context)


def most_read(queries: CaptureQueriesContext) -> tuple[int, str]:
    """The most rows any statement captured read, and that statement: its reads and writes
    (an insert of values reads nothing), each explained in a savepoint rolled back after; a
    prepared one (`CaptureStatements`) also under the plan its connection keeps for it."""
    explained = [(q["sql"], q["sql"], rows_read) for q in queries.captured_queries] + [
        (f"(prepared) {sql}", sql, lambda sql, values=values: generic_rows_read(sql, values))
        for sql, values in getattr(queries, "prepared", ())
    ]
    most = (0, "")
    for shown, sql, reader in explained:
        if not sql.lstrip().startswith(READS):
            continue
        with transaction.atomic():
            read = reader(sql)
            transaction.set_rollback(True)
        if read > most[0]:
            most = (read, shown)
    return most


READS = ("SELECT", "WITH", "UPDATE", "DELETE")


def generic_rows_read(sql: str, params: dict[str, Any] | Sequence[Any]) -> int:
    """`rows_read` for a statement of `fleet.prepared` under the plan a connection keeps for it:
    prepared, and planned without its values (a generic plan)."""
    if isinstance(params, dict):
        names: list[str] = []

        def numbered(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        text = re.sub(r"%\((\w+)\)s", numbered, sql)
        ordered = [params[name] for name in names]
    else:
        count = iter(range(1, len(params) + 1))
        text = re.sub(r"%s", lambda _: f"${next(count)}", sql)
        ordered = list(params)
    values = ", ".join(connection.ops.compose_sql("%s", [value]) for value in ordered)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE generic_read AS {text}")
        try:
            return rows_read(f"EXECUTE generic_read({values})")
        finally:
            cursor.execute("DEALLOCATE generic_read")
