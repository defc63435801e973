"""The query_result verifier: split the SQL, refuse all but one reading statement, re-run it."""

import re
from collections.abc import Mapping
from typing import Final, Literal

from runs.claims.hashing import canonical_json, query_result_payload
from runs.claims.verifiers.base import (
    Limits,
    Sources,
    Verdict,
    _Evidence,
    _judge,
    _preview,
    _registered,
    _Unverifiable,
)
from runs.claims.verifiers.query_postgresql import _run_on_postgresql
from runs.claims.verifiers.query_sqlite import _run_on_sqlite

Dialect = Literal["postgresql", "sqlite"]


# Statements that only read; anything else is refused before it reaches the database, and the
# read-only transaction (PostgreSQL) or read-only connection (SQLite) stops what slips through.
_READING_STATEMENTS: Final[Mapping[Dialect, frozenset[str]]] = {
    "postgresql": frozenset({"SELECT", "WITH", "VALUES", "TABLE"}),  # what DECLARE accepts
    "sqlite": frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"}),
}


def _reach_query(claimed: _Evidence, sources: Sources) -> tuple[str, str, Dialect, str]:
    """The data source and the one reading statement to run, or why there is none."""
    name, target = _registered("data source", sources.datasources, claimed.datasource)
    dialect: Dialect = "postgresql" if _is_postgresql_dsn(target) else "sqlite"
    return name, target, dialect, _single_reading_statement(claimed.source, dialect)


def _verify_query(claimed: _Evidence, sources: Sources, limits: Limits) -> Verdict:
    name, target, dialect, statement = _reach_query(claimed, sources)
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
