"""Running a query_result's query on PostgreSQL: read-only, within the limits, values as text."""

import math
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
