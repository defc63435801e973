"""A task's start on PostgreSQL, in raw SQL: the task's row and the claims it consumes written in
one statement.

The ORM writes the same rows in three or four statements (the embedded default, SQLite, takes
that path: `runs.claims.consumers.started_on`); here a data-modifying CTE writes them together,
so a start costs the same statements whatever the run's claims. Only `runs.task_state` calls it,
in the event's transaction.

Each claim is found by its own key or its own task (a LATERAL probe of an index each, fenced by
LIMIT or OFFSET so that the planner cannot turn it into a join): filtered by the run and a list,
a planner whose statistics predate the run's growth reads all its claims.
"""

from datetime import datetime
from typing import Any

from django.db import connection

from fleet.prepared import prepared_cursor
from runs.models import Claim, ClaimUse, Prerequisite, Task

START = """
    WITH RECURSIVE above(id) AS (
        SELECT requires_id FROM {edges} WHERE task_id = %(task)s AND %(implicit)s
        UNION SELECT e.requires_id FROM {edges} e JOIN above a ON e.task_id = a.id
    ), started AS (
        UPDATE {task} SET state = 'running', ready = false, refresh = '[]'::jsonb,
            started_at = COALESCE(started_at, %(at)s)
        WHERE id = %(task)s
        RETURNING id
    ), named(key) AS (
        SELECT unnest(%(named)s::text[])
        UNION
        SELECT c.key FROM above a CROSS JOIN LATERAL (
            SELECT key FROM {claim} WHERE task_id = a.id AND NOT superseded OFFSET 0
        ) c
    ), consumed AS (
        SELECT c.id, c.key, c.load_bearing FROM named n CROSS JOIN LATERAL (
            SELECT id, key, load_bearing FROM {claim} WHERE run_id = %(run)s AND key = n.key
            LIMIT 1
        ) c
        WHERE NOT n.key = ANY(%(checks)s::text[])
    ), used AS (
        INSERT INTO {use} (claim_id, task_id, at, by_check)
        SELECT id, %(task)s, %(at)s, false FROM consumed
        ON CONFLICT DO NOTHING
        RETURNING id
    ), raised AS (
        UPDATE {claim} SET load_bearing = true, raised_by = %(by)s
        -- none to raise (nearly every start): nothing read, whatever the planner thinks
        WHERE cardinality(%(raise)s::text[]) > 0 AND id = ANY(ARRAY(
            SELECT id FROM consumed WHERE key = ANY(%(raise)s::text[]) AND NOT load_bearing))
        RETURNING id
    )
    SELECT (SELECT count(*) FROM started), (SELECT count(*) FROM used),
        (SELECT count(*) FROM raised)
"""


def started_consuming(
    *, task: Task, extra: list[str], at: datetime, imported: bool
) -> tuple[int, int]:
    """The task is running from `at` (`started_at` kept if it ran before, `refresh` re-read), and
    consumes its claims (`consumers.consumed_by`); a claim it named on starting (`extra`) is
    raised to load-bearing, unless the run is imported. Returns (uses written, claims raised)."""
    names = {
        name: connection.ops.quote_name(model._meta.db_table)
        for name, model in (
            ("edges", Prerequisite),
            ("task", Task),
            ("claim", Claim),
            ("use", ClaimUse),
        )
    }
    params: dict[str, Any] = {
        "task": task.pk,
        "run": task.run_id,
        "at": at,
        "implicit": not imported and not task.consumes_declared,
        "named": sorted({*task.consumes, *extra}),
        "checks": list(task.checks),
        "raise": [] if imported else list(extra),
        "by": f"named by {task.key} on task.started"[:500],
    }
    with prepared_cursor() as cursor:
        # Only the models' table names are spliced in; every value is a parameter.
        cursor.execute(START.format(**names), params)  # noqa: S608
        _, used, raised = cursor.fetchone()
    return used, raised
