"""Running a query_result's query on PostgreSQL: read-only, within the limits, values as text."""

import json
import math
import re
import time
from typing import Any, Final

import psycopg
import psycopg.errors
import psycopg.postgres
from psycopg.types.bool import BoolLoader
from psycopg.types.numeric import FloatLoader, IntLoader
from psycopg.types.string import TextLoader

from fleet.datasources import too_privileged
from runs.claims.verifiers.base import Limits, _Refuted, _seconds, _Unverifiable


def _run_on_postgresql(
    name: str, dsn: str, statement: str, limits: Limits
) -> tuple[list[str], list[tuple[Any, ...]]]:
    timeout_ms = max(1, int(limits.query_timeout * 1000))
    try:
        connection = psycopg.connect(
            dsn, connect_timeout=max(2, math.ceil(limits.query_timeout)), autocommit=False
        )
    except psycopg.Error as error:
        raise _Unverifiable(
            f"could not connect to data source {name!r}: {_first_line(error)}"
        ) from None
    try:
        connection.read_only = True  # every transaction opens with BEGIN READ ONLY
        with connection.cursor() as cursor:  # checked at every connection: roles change
            why = too_privileged(cursor)
        if why:
            raise _Unverifiable(f"data source {name!r} was not queried: its {why}")
        _load_values_as_text(connection)
        with connection.cursor() as cursor:
            cursor.execute(_POSTGRESQL_SESSION, {"timeout": str(timeout_ms)})
            session = cursor.fetchone()
            if session is None or session[-1] != "on":
                raise _Unverifiable(f"data source {name!r} would not open a read-only transaction")
        denied = _denied_function(connection, statement)
        if denied:
            raise _Unverifiable(
                f"the query calls {denied}(), which the verifier does not allow: it may only "
                "read data, so nothing was run"
            )
        # A server-side cursor: DECLARE goes over the extended protocol, which refuses a second
        # statement, and FETCH brings at most the row cap over the wire.
        with connection.cursor(name="bulkhead_verifier") as cursor:
            deadline = time.monotonic() + limits.query_timeout
            cursor.execute(statement)
            columns = [column.name for column in cursor.description or []]
            return columns, _fetch_within(cursor, limits, deadline)
    except psycopg.Error as error:
        raise _postgresql_failure(name, error, limits) from None
    finally:
        connection.close()  # the read-only transaction ends unfinished: rolled back


_FETCH_BATCH: Final = 50


def _fetch_within(cursor: Any, limits: Limits, deadline: float) -> list[tuple[Any, ...]]:
    """At most the row cap, a batch at a time, stopping as soon as the result is over the size
    cap or the time limit: each FETCH is a statement of its own, with a timeout of its own."""
    rows: list[tuple[Any, ...]] = []
    size = 0
    while len(rows) <= limits.max_rows:
        batch = cursor.fetchmany(min(_FETCH_BATCH, limits.max_rows + 1 - len(rows)))
        if not batch:
            break
        rows.extend(batch)
        size += sum(len(str(value)) for row in batch for value in row)  # values come as text
        if size > limits.max_payload_bytes:
            raise _Unverifiable(
                f"the query's result is over {limits.max_payload_bytes} bytes; the verifier "
                "keeps results small"
            )
        if time.monotonic() > deadline:
            raise _Unverifiable(
                f"the query took longer than {limits.query_timeout:g} s, so it was stopped"
            )
    return rows


# Functions that reach past the data (files, other sessions, locks, sleeps, notifications,
# settings) or run SQL of their own from a string, which the plan below cannot see into. A role
# may hold EXECUTE on some of these by default (pg_terminate_backend on its own sessions).
_DENIED_FUNCTIONS: Final = re.compile(
    r"pg_(terminate|cancel)_backend|pg_read_(binary_)?file|pg_ls_\w+|pg_stat_file"
    r"|pg_(try_)?advisory\w*|lo_\w+|dblink\w*|set_config|pg_notify|pg_reload_conf"
    r"|pg_rotate_logfile|pg_log_backend_memory_contexts|pg_promote|pg_switch_wal|pg_create_\w+"
    r"|pg_drop_\w+|pg_replication_\w+|pg_logical_\w+|pg_file_\w+|pg_current_logfile"
    r"|pg_stat_reset\w*|pg_backup_\w+|pg_wal_replay_\w+|pg_import_system_collations"
    r"|(query|cursor|table|schema|database)_to_xml\w*|ts_stat|ts_rewrite"
)
_STRING_LITERAL: Final = re.compile(r"'(?:[^']|'')*'")
_CALL: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_$]*)\s*\(")


def _denied_function(connection: psycopg.Connection[Any], statement: str) -> str | None:
    """The first denied function the query's plan calls, by the name PostgreSQL resolved (so a
    quoted, escaped or schema-qualified spelling, or a view, hides nothing). EXPLAIN runs
    nothing; it is prepared, so the extended protocol refuses a second statement. A query that
    cannot be planned is left to fail when it runs, with its own reason."""
    try:
        with connection.transaction(), connection.cursor() as cursor:  # a savepoint
            cursor.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {statement}", prepare=True)
            row = cursor.fetchone()
    except psycopg.Error:
        return None
    plan = row[0] if row else []
    for text in _plan_strings(json.loads(plan) if isinstance(plan, str) else plan):
        for name in _CALL.findall(_STRING_LITERAL.sub("''", text)):
            if _DENIED_FUNCTIONS.fullmatch(name.lower()):
                return name.lower()
    return None


def _plan_strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [text for value in node.values() for text in _plan_strings(value)]
    if isinstance(node, list):
        return [text for value in node for text in _plan_strings(value)]
    return []


# Fixed session settings, so values print the same text whatever the role's defaults are.
_POSTGRESQL_SESSION: Final = """
SELECT set_config('statement_timeout', %(timeout)s, true),
       set_config('lock_timeout', %(timeout)s, true),
       set_config('idle_in_transaction_session_timeout', %(timeout)s, true),
       set_config('TimeZone', 'UTC', true),
       set_config('DateStyle', 'ISO, YMD', true),
       set_config('IntervalStyle', 'postgres', true),
       set_config('extra_float_digits', '1', true),
       set_config('bytea_output', 'hex', true),
       set_config('standard_conforming_strings', 'on', true),
       current_setting('transaction_read_only')
"""


def _load_values_as_text(connection: psycopg.Connection[Any]) -> None:
    """Booleans, integers and floats load as such; every other type as PostgreSQL's text form."""
    adapters = connection.adapters
    for info in psycopg.postgres.types:
        for oid in (info.oid, info.array_oid):
            if oid:
                adapters.register_loader(oid, TextLoader)
    adapters.register_loader("bool", BoolLoader)
    for integer in ("int2", "int4", "int8", "oid"):
        adapters.register_loader(integer, IntLoader)
    for floating in ("float4", "float8"):
        adapters.register_loader(floating, FloatLoader)


def _postgresql_failure(name: str, error: psycopg.Error, limits: Limits) -> Exception:
    message = _first_line(error)
    if isinstance(error, psycopg.errors.QueryCanceled):
        return _Unverifiable(
            f"the query ran longer than {_seconds(limits.query_timeout)} on data source "
            f"{name!r} and was stopped"
        )
    if isinstance(error, psycopg.errors.ReadOnlySqlTransaction):
        return _Unverifiable(
            f"the query tries to write ({message}); the verifier runs queries read-only, so "
            "nothing was changed"
        )
    if isinstance(error, psycopg.errors.FeatureNotSupported):
        return _Unverifiable(
            f"the verifier cannot run this query read-only on data source {name!r}: {message}"
        )
    if isinstance(error, psycopg.errors.InsufficientPrivilege):
        return _Unverifiable(f"data source {name!r} may not run this query: {message}")
    sqlstate = error.sqlstate or ""
    if sqlstate[:2] in {"42", "22", "21"}:  # the query itself is wrong for this database
        return _Refuted(f"re-ran the query on data source {name!r}: it fails: {message}")
    return _Unverifiable(f"the query could not run on data source {name!r}: {message}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
