"""Verifiers: re-check a claim's evidence against the fleet's registered sources, read-only."""

import hashlib
import math
import os
import re
import selectors
import shlex
import signal
import sqlite3
import stat
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Final, Literal

import httpx
import psycopg
import psycopg.errors
import psycopg.postgres
from psycopg.types.bool import BoolLoader
from psycopg.types.numeric import FloatLoader, IntLoader
from psycopg.types.string import TextLoader

from runs.evidence import (
    EVIDENCE_KINDS,
    HUMAN_ANSWER,
    canonical_json,
    file_read_payload,
    http_exchange_payload,
    is_payload_hash,
    payload_hash,
    query_result_payload,
    split_lines,
    test_run_payload,
)

Status = Literal["verified", "refuted", "unverified"]
Dialect = Literal["postgresql", "sqlite"]


@dataclass(frozen=True)
class Sources:
    """A fleet's registered verification sources, as plain values."""

    datasources: Mapping[str, str] = field(default_factory=dict)  # name -> DSN or SQLite path
    workspaces: Mapping[str, str] = field(default_factory=dict)  # name -> directory
    hosts: frozenset[str] = frozenset()  # "host" (default port) or "host:port"
    commands: frozenset[str] = frozenset()  # exact command lines


@dataclass(frozen=True)
class Limits:
    """What a check may cost: checks must stay cheap, or they become a second fleet."""

    query_timeout: float = 5.0  # seconds
    max_rows: int = 1000
    max_payload_bytes: int = 1024 * 1024  # canonical JSON of a query result; SQLite value size
    max_file_bytes: int = 1024 * 1024
    http_timeout: float = 10.0  # seconds, for the whole exchange
    max_body_bytes: int = 10 * 1024 * 1024
    max_redirects: int = 5  # same host only
    command_timeout: float = 300.0  # seconds
    max_output_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value <= 0:
                raise ValueError(f"Limits.{name} must be positive, not {value}")


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True)
class Verdict:
    """`payload` is what reality gave (the ground truth when refuted), None if nothing was read."""

    status: Status
    reason: str
    payload: dict[str, Any] | None = None


class _Unverifiable(Exception):
    """No verifier can reach the evidence; the message says why, for a reviewer."""


class _Refuted(Exception):
    """Reality contradicts the evidence but yields no payload (a failing query, a missing file)."""


@dataclass(frozen=True)
class _Evidence:
    kind: str
    source: str
    payload_hash: str
    payload: Mapping[str, Any] | None
    datasource: str | None
    workspace: str | None


def verify(
    evidence: Mapping[str, Any], sources: Sources, *, limits: Limits = DEFAULT_LIMITS
) -> Verdict:
    """Re-check one piece of evidence against reality; never raises for bad evidence."""
    try:
        claimed = _read_evidence(evidence)
        return _VERIFIERS[claimed.kind](claimed, sources, limits)
    except _Unverifiable as unverifiable:
        return Verdict("unverified", str(unverifiable))
    except _Refuted as refuted:
        return Verdict("refuted", str(refuted))
    except OSError as error:  # the source is there but could not be read to the end
        return Verdict("unverified", f"the verifier could not reach the source: {error}")


def _read_evidence(evidence: Mapping[str, Any]) -> _Evidence:
    source = evidence.get("source")
    if not isinstance(source, str) or not source.strip():
        raise _Unverifiable("the evidence has no source to check")
    if source.lstrip().lower().startswith("agent:"):
        raise _Unverifiable("another agent's text is not evidence")
    kind = evidence.get("kind")
    if kind == HUMAN_ANSWER:
        raise _Unverifiable("only a reviewer can record a human answer")
    if kind not in EVIDENCE_KINDS:
        raise _Unverifiable(
            f"unknown evidence kind {kind!r}: a verifier checks {', '.join(EVIDENCE_KINDS)}"
        )
    claimed_hash = evidence.get("payload_hash")
    if not is_payload_hash(claimed_hash):
        raise _Unverifiable("payload_hash must be 'sha256:' followed by 64 lowercase hex digits")
    payload = evidence.get("payload")
    names = {key: evidence.get(key) for key in ("datasource", "workspace")}
    for key, name in names.items():
        if name is not None and not isinstance(name, str):
            raise _Unverifiable(f"{key} must be the name of a registered {key}")
    return _Evidence(
        kind=kind,
        source=source,
        payload_hash=claimed_hash,
        payload=payload if isinstance(payload, Mapping) else None,
        datasource=names["datasource"],
        workspace=names["workspace"],
    )


def _registered(kind: str, registry: Mapping[str, str], name: str | None) -> tuple[str, str]:
    if name is None:
        if len(registry) == 1:
            return next(iter(registry.items()))
        count = f"{len(registry)} are" if registry else "none is"
        raise _Unverifiable(f"the evidence names no {kind}, and {count} registered for this fleet")
    if name not in registry:
        raise _Unverifiable(f"no {kind} named {name!r} is registered for this fleet")
    return name, registry[name]


def _judge(claimed: _Evidence, observed: dict[str, Any], checked: str, summary: str) -> Verdict:
    if payload_hash(observed) == claimed.payload_hash:
        return Verdict("verified", f"{checked}: reality matches the payload hash", observed)
    reason = f"{checked}: reality differs from the payload hash; {summary}"
    return Verdict("refuted", reason, observed)


def _preview(value: object, limit: int = 200) -> str:
    text = canonical_json(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seconds(value: float) -> str:
    return f"{value:g} s"


# query_result ---------------------------------------------------------------------------------

# Statements that only read; anything else is refused before it reaches the database, and the
# read-only transaction (PostgreSQL) or read-only connection (SQLite) stops what slips through.
_READING_STATEMENTS: Final[Mapping[Dialect, frozenset[str]]] = {
    "postgresql": frozenset({"SELECT", "WITH", "VALUES", "TABLE"}),  # what DECLARE accepts
    "sqlite": frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"}),
}


def _verify_query(claimed: _Evidence, sources: Sources, limits: Limits) -> Verdict:
    name, target = _registered("data source", sources.datasources, claimed.datasource)
    dialect: Dialect = "postgresql" if _is_postgresql_dsn(target) else "sqlite"
    statement = _single_reading_statement(claimed.source, dialect)
    if dialect == "postgresql":
        columns, rows = _run_on_postgresql(name, target, statement, limits)
    else:
        columns, rows = _run_on_sqlite(name, target, statement, limits)
    if len(rows) > limits.max_rows:
        raise _Unverifiable(
            f"the query returns more than {limits.max_rows} rows; the verifier reads at most "
            f"{limits.max_rows}, so it cannot compare the whole result"
        )
    observed = query_result_payload(columns=columns, rows=rows)
    if len(canonical_json(observed)) > limits.max_payload_bytes:
        raise _Unverifiable(
            f"the query's result is over {limits.max_payload_bytes} bytes; the verifier keeps "
            "results small"
        )
    summary = (
        f"it returns {len(rows)} row(s), columns {_preview(columns)}: {_preview(observed['rows'])}"
    )
    return _judge(claimed, observed, f"re-ran the query on data source {name!r}", summary)


def _is_postgresql_dsn(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def _single_reading_statement(query: str, dialect: Dialect) -> str:
    try:
        statements = split_sql(query, dialect)
    except ValueError as error:
        raise _Unverifiable(f"the query cannot be read: {error}") from None
    if not statements:
        raise _Unverifiable("the query is empty")
    if len(statements) > 1:
        raise _Unverifiable(
            f"the query holds {len(statements)} statements; the verifier runs exactly one, so it "
            "was not run"
        )
    statement = statements[0]
    keyword = _leading_keyword(statement, dialect)
    allowed = _READING_STATEMENTS[dialect]
    if keyword not in allowed:
        shown = keyword or statement[:20]
        raise _Unverifiable(
            f"the query starts with {shown!r}: the verifier only runs queries that read "
            f"({', '.join(sorted(allowed))}), so it was not run"
        )
    return statement


def split_sql(text: str, dialect: Dialect) -> list[str]:
    """The statements of `text` (split on top-level `;`), without comment-only pieces.

    Aware of quotes, quoted identifiers, comments (nested in PostgreSQL) and PostgreSQL's
    dollar-quoted and E'' strings, so a `;` inside any of them does not split.
    """
    statements: list[str] = []
    start = 0
    has_code = False
    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        if text.startswith("--", i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline + 1
            continue
        if text.startswith("/*", i):
            i = _skip_block_comment(text, i, nested=dialect == "postgresql")
            continue
        if char == ";":
            if has_code:
                statements.append(text[start:i].strip())
            start, has_code, i = i + 1, False, i + 1
            continue
        if not char.isspace():
            has_code = True
        if char == "'":
            escapes = dialect == "postgresql" and _is_escape_string(text, i)
            i = _skip_quoted(text, i, "'", backslash_escapes=escapes)
        elif char == '"' or (char == "`" and dialect == "sqlite"):
            i = _skip_quoted(text, i, char)
        elif char == "[" and dialect == "sqlite":
            close = text.find("]", i + 1)
            if close < 0:
                raise ValueError("an unterminated [identifier]")
            i = close + 1
        elif char == "$" and dialect == "postgresql" and (tag := _dollar_tag(text, i)):
            close = text.find(tag, i + len(tag))
            if close < 0:
                raise ValueError(f"an unterminated {tag}-quoted string")
            i = close + len(tag)
        else:
            i += 1
    if has_code:
        statements.append(text[start:].strip())
    return statements


_IDENTIFIER_CHAR: Final = re.compile(r"[\w$\u0080-\U0010ffff]", re.ASCII)
_DOLLAR_TAG: Final = re.compile(
    r"\$(?:[A-Za-z_\u0080-\U0010ffff][\w\u0080-\U0010ffff]*)?\$", re.ASCII
)


def _is_identifier_char(text: str, i: int) -> bool:
    return i >= 0 and _IDENTIFIER_CHAR.fullmatch(text[i]) is not None


def _is_escape_string(text: str, quote: int) -> bool:
    return quote >= 1 and text[quote - 1] in "eE" and not _is_identifier_char(text, quote - 2)


def _dollar_tag(text: str, i: int) -> str | None:
    if _is_identifier_char(text, i - 1):
        return None  # `$` inside an identifier such as a$b
    match = _DOLLAR_TAG.match(text, i)
    return match.group() if match else None


def _skip_quoted(text: str, i: int, quote: str, *, backslash_escapes: bool = False) -> int:
    j = i + 1
    while j < len(text):
        char = text[j]
        if backslash_escapes and char == "\\":
            j += 2
        elif char == quote:
            if text.startswith(quote, j + 1):
                j += 2  # a doubled quote stands for itself
            else:
                return j + 1
        else:
            j += 1
    raise ValueError(f"an unterminated {quote}-quoted text")


def _skip_block_comment(text: str, i: int, *, nested: bool) -> int:
    depth = 0
    j = i
    while j < len(text):
        if text.startswith("/*", j) and (nested or depth == 0):
            depth += 1
            j += 2
        elif text.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        else:
            j += 1
    raise ValueError("an unterminated /* comment */")


def _leading_keyword(statement: str, dialect: Dialect) -> str:
    """The first word after whitespace, `(` and comments, read as `split_sql` reads them (nested
    in PostgreSQL), so `/* /* */ SELECT */ DROP ...` starts with DROP, as the server sees it."""
    i, n = 0, len(statement)
    while i < n:
        if statement[i].isspace() or statement[i] == "(":
            i += 1
        elif statement.startswith("--", i):
            newline = statement.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif statement.startswith("/*", i):
            i = _skip_block_comment(statement, i, nested=dialect == "postgresql")
        else:
            break
    word = re.match(r"[A-Za-z_]+", statement[i:])
    return word.group().upper() if word else ""


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
        connection.execute("PRAGMA query_only = ON")
        connection.set_authorizer(_sqlite_authorizer)
        deadline = time.monotonic() + limits.query_timeout
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        cursor = connection.execute(statement)
        columns = [column[0] for column in cursor.description or []]
        rows = cursor.fetchmany(limits.max_rows + 1)
        return columns, rows
    except sqlite3.Error as error:
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


def _sqlite_authorizer(
    action: int, first: str | None, second: str | None, database: str | None, trigger: str | None
) -> int:
    if action in _SQLITE_READS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if second == "load_extension" else sqlite3.SQLITE_OK
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


# file_read ------------------------------------------------------------------------------------

_LINE_RANGE: Final = re.compile(r"(?P<path>.+):(?P<start>[0-9]+)-(?P<end>[0-9]+)", re.DOTALL)


def _verify_file_read(claimed: _Evidence, sources: Sources, limits: Limits) -> Verdict:
    match = _LINE_RANGE.fullmatch(claimed.source)
    if match is None:
        raise _Unverifiable("a file_read source must be path:start-end, such as config.yaml:3-7")
    path, start, end = match["path"], int(match["start"]), int(match["end"])
    if not 1 <= start <= end:
        raise _Unverifiable(f"the line range {start}-{end} must have 1 <= start <= end")
    name, directory = _registered("workspace", sources.workspaces, claimed.workspace)
    content = _read_inside(name, directory, path, limits)
    lines = split_lines(content)
    if end > len(lines):
        raise _Refuted(
            f"re-read {path} in workspace {name!r}: it has {len(lines)} lines, so lines "
            f"{start}-{end} do not exist"
        )
    observed = file_read_payload(path=path, start=start, end=end, lines=lines[start - 1 : end])
    summary = f"lines {start}-{end} read {_preview(observed['text'])}"
    return _judge(claimed, observed, f"re-read {path} in workspace {name!r}", summary)


def _read_inside(name: str, directory: str, path: str, limits: Limits) -> str:
    root = Path(directory).absolute()
    try:
        real_root = root.resolve(strict=True)
    except OSError:
        raise _Unverifiable(f"workspace {name!r} ({directory}) does not exist") from None
    if "\x00" in path:
        raise _Unverifiable("the path holds a NUL byte")
    relative = PurePath(path)
    if ".." in relative.parts:
        raise _Unverifiable(
            f"{path} climbs out with '..'; the verifier reads only inside workspace {name!r}"
        )
    if relative.is_absolute() and not any(map(Path(path).is_relative_to, (root, real_root))):
        raise _Unverifiable(
            f"{path} is outside workspace {name!r}; the verifier reads only inside it"
        )
    real = (root / relative).resolve()  # an absolute path replaces the root
    if not real.is_relative_to(real_root):
        raise _Unverifiable(f"{path} is a link that leaves workspace {name!r}; it was not read")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _Refuted(f"re-read workspace {name!r}: there is no file {path}") from None
    except OSError as error:
        reason = f"could not open {path} in workspace {name!r}: {error.strerror}"
        raise _Unverifiable(reason) from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):  # a directory too: open() of it would raise
        os.close(descriptor)
        raise _Unverifiable(f"{path} in workspace {name!r} is not a regular file")
    with open(descriptor, "rb") as file:
        if status.st_size > limits.max_file_bytes:
            raise _Unverifiable(
                f"{path} is {status.st_size} bytes; the verifier reads files of at most "
                f"{limits.max_file_bytes} bytes"
            )
        data = file.read(limits.max_file_bytes + 1)
    if len(data) > limits.max_file_bytes:
        raise _Unverifiable(f"{path} grew past {limits.max_file_bytes} bytes while being read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Unverifiable(f"{path} in workspace {name!r} is not UTF-8 text") from None


# http_exchange --------------------------------------------------------------------------------

_REFETCHED_METHODS: Final = frozenset({"GET", "HEAD"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def _verify_http(claimed: _Evidence, sources: Sources, limits: Limits) -> Verdict:
    method = _claimed_method(claimed.payload)
    if method not in _REFETCHED_METHODS:
        raise _Unverifiable(
            f"only GET and HEAD are re-fetched; a {method} may change something, so it was not "
            "sent again"
        )
    try:
        url = httpx.URL(claimed.source)
    except httpx.InvalidURL as error:
        raise _Unverifiable(f"the source is not a URL: {error}") from None
    if url.scheme not in _DEFAULT_PORTS or not url.host:
        raise _Unverifiable("the source must be an http:// or https:// URL")
    hosts = frozenset(host.strip().lower() for host in sources.hosts)
    if not _host_allowed(url, hosts):
        raise _Unverifiable(
            f"{_host_and_port(url)} is not an allowed host for this fleet, so it was not fetched"
        )
    status, body_sha256 = _fetch(method, url, hosts, limits)
    observed = http_exchange_payload(
        method=method, url=claimed.source, status=status, body_sha256=body_sha256
    )
    summary = f"it answers {status} with a body whose sha256 is {body_sha256}"
    return _judge(claimed, observed, f"re-fetched {method} {claimed.source}", summary)


def _claimed_method(payload: Mapping[str, Any] | None) -> str:
    request = payload.get("request") if payload else None
    method = request.get("method") if isinstance(request, Mapping) else None
    return method.upper() if isinstance(method, str) else "GET"


def _host_and_port(url: httpx.URL) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{url.port or _DEFAULT_PORTS.get(url.scheme)}"


def _host_allowed(url: httpx.URL, hosts: frozenset[str]) -> bool:
    """`host` allows the scheme's default port only; `host:port` allows that port."""
    default_port = _DEFAULT_PORTS.get(url.scheme)
    if default_port is None:
        return False
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or default_port
    return f"{host}:{port}" in hosts or (port == default_port and host in hosts)


def _fetch(method: str, url: httpx.URL, hosts: frozenset[str], limits: Limits) -> tuple[int, str]:
    deadline = time.monotonic() + limits.http_timeout
    target = url
    try:
        with httpx.Client(
            timeout=limits.http_timeout,
            follow_redirects=False,
            trust_env=False,
            headers={"user-agent": "bulkhead-verifier"},
        ) as client:
            for _ in range(limits.max_redirects + 1):
                with client.stream(method, target) as response:
                    if response.is_redirect:
                        target = target.join(response.headers["location"])
                        if target.host != url.host or not _host_allowed(target, hosts):
                            raise _Unverifiable(
                                f"the server redirects to {target}, another host; the verifier "
                                "does not follow redirects off the host"
                            )
                        continue
                    return response.status_code, _body_sha256(response, deadline, limits)
    except httpx.TimeoutException:
        raise _timed_out(limits) from None
    except httpx.InvalidURL as error:
        raise _Unverifiable(f"the server redirects to an invalid URL: {error}") from None
    except httpx.HTTPError as error:
        raise _Unverifiable(f"could not fetch {url}: {error}") from None
    raise _Unverifiable(f"the server redirects more than {limits.max_redirects} times")


def _body_sha256(response: httpx.Response, deadline: float, limits: Limits) -> str:
    digest = hashlib.sha256()
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise _Unverifiable(
                f"the body is over {limits.max_body_bytes} bytes; the verifier stopped reading it"
            )
        if time.monotonic() > deadline:
            raise _timed_out(limits)
        digest.update(chunk)
    return digest.hexdigest()


def _timed_out(limits: Limits) -> _Unverifiable:
    return _Unverifiable(f"the host did not answer within {_seconds(limits.http_timeout)}")


# test_run -------------------------------------------------------------------------------------


def _verify_test_run(claimed: _Evidence, sources: Sources, limits: Limits) -> Verdict:
    command = claimed.source
    if command not in sources.commands:
        raise _Unverifiable(
            "the command is not one of the fleet's allowed test commands (it must match one "
            "exactly), so it was not run"
        )
    name, directory = _registered("workspace", sources.workspaces, claimed.workspace)
    if not Path(directory).is_dir():
        raise _Unverifiable(f"workspace {name!r} ({directory}) does not exist")
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise _Unverifiable(f"the command line cannot be split into words: {error}") from None
    if not argv:
        raise _Unverifiable("the command line is empty")
    exit_code, output_sha256 = _run_command(argv, directory, limits)
    observed = test_run_payload(command=command, exit_code=exit_code, output_sha256=output_sha256)
    summary = f"it exits with {exit_code}"
    claimed_exit = claimed.payload.get("exit_code") if claimed.payload else None
    if claimed_exit == exit_code:
        summary += (
            ", as claimed, but its output differs: the output hash covers every byte, so "
            "timings or random order in the output change it"
        )
    return _judge(claimed, observed, f"re-ran {command!r} in workspace {name!r}", summary)


def _command_environment() -> dict[str, str]:
    # The command runs code the agents wrote: it gets no secrets from the verifier's environment.
    kept = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
    return kept | {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC"}


def _run_command(argv: list[str], directory: str, limits: Limits) -> tuple[int, str]:
    try:
        process = subprocess.Popen(
            argv,
            cwd=directory,
            env=_command_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order written: `2>&1`
            start_new_session=True,  # its own process group, so it can be stopped whole
        )
    except (OSError, ValueError) as error:
        raise _Unverifiable(f"could not start the command: {error}") from None
    try:
        output_sha256 = _hash_output(process, limits)
    finally:
        _stop_process_group(process)
        code = process.wait()
    return (128 - code if code < 0 else code), output_sha256


def _hash_output(process: subprocess.Popen[bytes], limits: Limits) -> str:
    """Hash what the command writes until it exits (not what background children write later)."""
    assert process.stdout is not None
    descriptor = process.stdout.fileno()
    deadline = time.monotonic() + limits.command_timeout
    digest = hashlib.sha256()
    size = 0
    closed = False
    with selectors.DefaultSelector() as selector:
        selector.register(descriptor, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Unverifiable(
                    f"the command did not finish within {_seconds(limits.command_timeout)} and "
                    "was stopped"
                )
            exited = _has_exited(process)
            if closed:
                if exited:
                    return digest.hexdigest()
                time.sleep(min(0.05, remaining))
                continue
            if not selector.select(0 if exited else min(0.1, remaining)):
                if exited:
                    return digest.hexdigest()
                continue
            chunk = os.read(descriptor, 65536)
            if not chunk:
                closed = True
                continue
            size += len(chunk)
            if size > limits.max_output_bytes:
                raise _Unverifiable(
                    f"the command wrote more than {limits.max_output_bytes} bytes and was stopped"
                )
            digest.update(chunk)


def _has_exited(process: subprocess.Popen[bytes]) -> bool:
    # WNOWAIT leaves the process a zombie, so its process group id cannot be reused before
    # the group is stopped.
    try:
        waited = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (SIGCHLD ignored)
        return True
    return waited is not None


def _stop_process_group(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.stdout is not None:
        process.stdout.close()


_VERIFIERS: Final[Mapping[str, Callable[[_Evidence, Sources, Limits], Verdict]]] = {
    "query_result": _verify_query,
    "file_read": _verify_file_read,
    "http_exchange": _verify_http,
    "test_run": _verify_test_run,
}
