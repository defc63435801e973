"""What PostgreSQL's plan for a statement read: for the tests that a look-up reads the rows it
names, not a table's, however far the table has grown since its statistics were last taken."""

import json
import re
from collections.abc import Iterator
from typing import Any

from django.db import connection, transaction
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


def most_read(queries: CaptureQueriesContext) -> tuple[int, str]:
    """The most rows any statement captured read, and that statement: its reads and writes
    (an insert of values reads nothing), each explained in a savepoint rolled back after."""
    most = (0, "")
    for query in queries.captured_queries:
        sql = query["sql"]
        if not sql.lstrip().startswith(("SELECT", "WITH", "UPDATE", "DELETE")):
            continue
        with transaction.atomic():
            read = rows_read(sql)
            transaction.set_rollback(True)
        if read > most[0]:
            most = (read, sql)
    return most


def generic_rows_read(sql: str, params: dict[str, Any]) -> int:
    """`rows_read` for a statement of `fleet.prepared` (`%(name)s` parameters) under the plan a
    connection keeps for it: prepared, and planned without its values (a generic plan)."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", numbered, sql)
    values = ", ".join(connection.ops.compose_sql("%s", [params[name]]) for name in names)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE generic_read AS {text}")
        try:
            return rows_read(f"EXECUTE generic_read({values})")
        finally:
            cursor.execute("DEALLOCATE generic_read")
