"""What PostgreSQL's plan for a statement read: for the tests that a look-up reads the rows it
names, not a table's, however far the table has grown since its statistics were last taken."""

import json
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
