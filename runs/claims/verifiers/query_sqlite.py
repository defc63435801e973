"""Running a query_result's query on SQLite: a read-only connection that may only read."""

import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any, Final

from runs.claims.verifiers.base import Limits, _Refuted, _seconds, _Unverifiable


def _run_on_sqlite(
    name: str, path: str, statement: str, limits: Limits
) -> tuple[list[str], list[tuple[Any, ...]]]:
    database = Path(path)
    if not database.is_file():
        raise _Unverifiable(f"data source {name!r} has no SQLite database file at {path}")
    uri = "file:" + urllib.parse.quote(str(database.resolve())) + "?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True, timeout=limits.query_timeout)
    except sqlite3.Error as error:
        raise _Unverifiable(f"could not open data source {name!r}: {error}") from None
    try:
        connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)  # ATTACH could create files
        connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, min(limits.max_payload_bytes, 2**31 - 1))
        connection.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)
        connection.setconfig(sqlite3.SQLITE_DBCONFIG_TRUSTED_SCHEMA, False)
        connection.setconfig(sqlite3.SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, False)
        if hasattr(connection, "enable_load_extension"):  # builds without it cannot load any
            connection.enable_load_extension(False)
        connection.execute("PRAGMA query_only = ON")
        denied: list[str] = []
        connection.set_authorizer(_sqlite_authorizer(denied))
        deadline = time.monotonic() + limits.query_timeout
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        cursor = connection.execute(statement)
        columns = [column[0] for column in cursor.description or []]
        rows = cursor.fetchmany(limits.max_rows + 1)
        return columns, rows
    except sqlite3.Error as error:
        if denied:
            raise _Unverifiable(
                f"the query calls {denied[0]}(), which the verifier does not allow: it may only "
                "read this database, so nothing was run"
            ) from None
        raise _sqlite_failure(name, error, limits) from None
    finally:
        connection.close()


_SQLITE_READS: Final = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, 33})  # 33: RECURSIVE
# Pragmas that only describe the schema, with or without an argument.
_SQLITE_INSPECTING_PRAGMAS: Final = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_info",
        "index_xinfo",
        "index_list",
        "foreign_key_list",
    }
)
# Pragmas that read a value without an argument and set it with one.
_SQLITE_READING_PRAGMAS: Final = frozenset(
    {
        "application_id",
        "collation_list",
        "compile_options",
        "data_version",
        "database_list",
        "encoding",
        "freelist_count",
        "function_list",
        "module_list",
        "page_count",
        "page_size",
        "pragma_list",
        "schema_version",
        "user_version",
    }
)


# Functions that reach outside the database or into the process: never called by a check. Their
# one- and two-argument forms alike (fts3_tokenizer returns a native pointer with one argument).
_SQLITE_DENIED_FUNCTIONS: Final = frozenset(
    {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit", "zipfile"}
)


def _sqlite_authorizer(denied: list[str]) -> Any:
    """Reads only; a denied function is named in `denied` for the reason."""

    def authorize(
        action: int,
        first: str | None,
        second: str | None,
        database: str | None,
        trigger: str | None,
    ) -> int:
        if action == sqlite3.SQLITE_FUNCTION and (second or "").lower() in _SQLITE_DENIED_FUNCTIONS:
            denied.append((second or "").lower())
            return sqlite3.SQLITE_DENY
        return _sqlite_reads_only(action, first, second)

    return authorize


def _sqlite_reads_only(action: int, first: str | None, second: str | None) -> int:
    if action in _SQLITE_READS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        pragma = (first or "").lower()
        if pragma in _SQLITE_INSPECTING_PRAGMAS:
            return sqlite3.SQLITE_OK
        if pragma in _SQLITE_READING_PRAGMAS and second is None:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_UPDATE and first in {"sqlite_master", "sqlite_schema"}:
        return sqlite3.SQLITE_OK  # asked while reading the schema for a pragma table; mode=ro
    return sqlite3.SQLITE_DENY


def _sqlite_failure(name: str, error: sqlite3.Error, limits: Limits) -> Exception:
    code = getattr(error, "sqlite_errorname", "")
    if code == "SQLITE_INTERRUPT":
        return _Unverifiable(
            f"the query ran longer than {_seconds(limits.query_timeout)} on data source "
            f"{name!r} and was stopped"
        )
    if code.startswith("SQLITE_READONLY"):
        return _Unverifiable(
            f"the query tries to write ({error}); the verifier runs queries read-only, so "
            "nothing was changed"
        )
    if code.startswith("SQLITE_AUTH") or str(error).startswith("not authorized"):
        return _Unverifiable(
            f"the query uses something the verifier does not allow ({error}): it may only read "
            "this database, so nothing was changed"
        )
    if code == "SQLITE_TOOBIG":
        return _Unverifiable(
            f"the query reads a value over {limits.max_payload_bytes} bytes; the verifier keeps "
            "results small"
        )
    if code == "SQLITE_ERROR":  # no such table or column, a syntax error: the query is wrong
        return _Refuted(f"re-ran the query on data source {name!r}: it fails: {error}")
    return _Unverifiable(f"the query could not run on data source {name!r}: {error}")
