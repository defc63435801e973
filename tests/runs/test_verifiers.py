"""Verifiers re-check evidence against real databases, files, HTTP servers and commands."""

import gzip
import os
import shlex
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from runs.claims.hashing import (
    file_read_payload,
    http_exchange_payload,
    payload_hash,
    query_result_payload,
    sha256_hex,
)
from runs.claims.hashing import test_run_payload as run_payload
from runs.claims.verifiers import Limits, Sources, Verdict, split_sql, unreachable, verify
from tests.fixtures.orders import read_only_dsn

ADMIN_DSN = os.environ.get("BULKHEAD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
SEED_QUERY_POSTGRESQL = (
    "SELECT column_name FROM information_schema.columns "
    "WHERE table_name = 'customers' ORDER BY ordinal_position"
)
SEED_QUERY_SQLITE = "SELECT name FROM pragma_table_info('customers')"
REAL_COLUMNS = [["id"], ["name"], ["email"]]
INVENTED_COLUMNS = [*REAL_COLUMNS, ["customer_tier"]]
PRICING_YAML = '# pricing\ntiers:\n  loyalty_points_threshold: 500\n  discount: "10%"\n'


def evidence(kind: str, source: str, payload: dict[str, Any], **names: str) -> dict[str, Any]:
    return {"kind": kind, "source": source, "payload_hash": payload_hash(payload), **names}


def columns_evidence(
    query: str, column: str, rows: list[list[str]], **names: str
) -> dict[str, Any]:
    return evidence(
        "query_result", query, query_result_payload(columns=[column], rows=rows), **names
    )


def assert_unverified(verdict: Verdict, *words: str) -> None:
    assert verdict.status == "unverified", verdict
    assert verdict.payload is None
    for word in words:
        assert word in verdict.reason, verdict.reason


# Evidence that no verifier checks ------------------------------------------------------------


def test_another_agents_text_is_not_evidence() -> None:
    verdict = verify(
        evidence("query_result", "agent:planner", {"columns": [], "rows": []}), Sources()
    )
    assert verdict == Verdict("unverified", "another agent's text is not evidence")


def test_a_human_answer_is_left_to_the_reviewer() -> None:
    verdict = verify(evidence("human_answer", "reviewer:alice", {"answer": "yes"}), Sources())
    assert verdict == Verdict("unverified", "only a reviewer can record a human answer")


def test_an_unknown_kind_is_named() -> None:
    verdict = verify(evidence("gut_feeling", "trust me", {}), Sources())
    assert_unverified(verdict, "'gut_feeling'", "query_result")


@pytest.mark.parametrize("bad_hash", ["9f3a...e1", "sha256:" + "A" * 64, None, 42])
def test_a_malformed_payload_hash_is_named(bad_hash: object) -> None:
    claim = {"kind": "query_result", "source": "SELECT 1", "payload_hash": bad_hash}
    assert_unverified(verify(claim, Sources(datasources={"crm": "x.db"})), "payload_hash")


def test_evidence_without_a_source_is_named() -> None:
    verdict = verify(
        {"kind": "file_read", "source": "  ", "payload_hash": payload_hash({})}, Sources()
    )
    assert_unverified(verdict, "no source")


# Splitting SQL into statements ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("SELECT 1", 1),
        ("SELECT 1;", 1),
        ("SELECT 1; -- and a comment", 1),
        ("SELECT 1; /* ; */ ;; ", 1),
        ("SELECT ';'", 1),
        ("SELECT 'it''s; fine'", 1),
        ('SELECT 1 AS "a;b"', 1),
        ("SELECT 1 -- ; DROP TABLE customers", 1),
        ("SELECT 1; DROP TABLE customers", 2),
        ("SELECT 1;DROP TABLE customers;", 2),
        ("SELECT ';' ; DROP TABLE customers", 2),
        ("SELECT 1 /* ; */; DROP TABLE customers -- ;", 2),
        ("SELECT 1;\n-- comment\nDROP TABLE customers", 2),
    ],
)
@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_it_counts_statements_outside_quotes_and_comments(
    query: str, count: int, dialect: Any
) -> None:
    assert len(split_sql(query, dialect)) == count


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("SELECT $$;$$", 1),
        ("SELECT $tag$ ; $$ ; $tag$", 1),
        ("SELECT $tag$ ; $tag$; DROP TABLE customers", 2),
        ("SELECT E'\\'; DROP TABLE customers'", 1),  # \' does not end an E'' string
        ("SELECT a$b$c FROM t; SELECT 2", 2),  # $ inside an identifier is no quote
        ("SELECT $1; SELECT 2", 2),
        ("/* outer /* inner */ ; still a comment */ SELECT 1", 1),
    ],
)
def test_it_reads_postgresql_strings_and_nested_comments(query: str, count: int) -> None:
    assert len(split_sql(query, "postgresql")) == count


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("SELECT [a;b] FROM t", 1),
        ("SELECT `a;b` FROM t", 1),
        ("SELECT 'a\\'; DROP TABLE customers", 2),  # no backslash escapes in SQLite
        ("/* /* */ ; SELECT 1", 1),  # comments do not nest in SQLite
    ],
)
def test_it_reads_sqlite_quoting(query: str, count: int) -> None:
    assert len(split_sql(query, "sqlite")) == count


@pytest.mark.parametrize(
    "query", ["SELECT 'open", "SELECT $x$ open", "SELECT 1 /* open", 'SELECT "a']
)
def test_it_refuses_unterminated_quotes_and_comments(query: str) -> None:
    with pytest.raises(ValueError, match="unterminated"):
        split_sql(query, "postgresql")


# SQLite data sources --------------------------------------------------------------------------


@pytest.fixture
def crm_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "crm.sqlite3"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT)")
        connection.executemany(
            "INSERT INTO customers (name, email) VALUES (?, ?)",
            [("Ada", "ada@example.com"), ("Grace", "grace@example.com")],
        )
    connection.close()
    return path


def sqlite_customers(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        (count,) = connection.execute("SELECT count(*) FROM customers").fetchone()
    connection.close()
    return int(count)


def test_the_invented_customer_tier_column_is_refuted_on_sqlite(crm_sqlite: Path) -> None:
    claim = columns_evidence(SEED_QUERY_SQLITE, "name", INVENTED_COLUMNS)
    verdict = verify(claim, Sources(datasources={"crm": str(crm_sqlite)}))
    assert verdict.status == "refuted"
    assert verdict.payload == {"columns": ["name"], "rows": REAL_COLUMNS}
    assert "data source 'crm'" in verdict.reason and '["email"]' in verdict.reason


def test_the_real_columns_are_verified_on_sqlite(crm_sqlite: Path) -> None:
    claim = columns_evidence(SEED_QUERY_SQLITE, "name", REAL_COLUMNS, datasource="crm")
    verdict = verify(claim, Sources(datasources={"crm": str(crm_sqlite)}))
    assert verdict.status == "verified", verdict.reason
    assert verdict.payload == {"columns": ["name"], "rows": REAL_COLUMNS}


def test_a_query_on_a_missing_column_is_refuted_with_the_database_error(crm_sqlite: Path) -> None:
    claim = columns_evidence("SELECT customer_tier FROM customers", "customer_tier", [["gold"]])
    verdict = verify(claim, Sources(datasources={"crm": str(crm_sqlite)}))
    assert verdict == Verdict(
        "refuted", "re-ran the query on data source 'crm': it fails: no such column: customer_tier"
    )


def test_sqlite_values_follow_the_cell_rules(crm_sqlite: Path) -> None:
    query = "SELECT NULL, 1, 0.5, 'é', x'01ff', 1e999"
    payload = query_result_payload(
        columns=["NULL", "1", "0.5", "'é'", "x'01ff'", "1e999"],
        rows=[[None, 1, 0.5, "é", b"\x01\xff", float("inf")]],
    )
    verdict = verify(
        evidence("query_result", query, payload), Sources(datasources={"crm": str(crm_sqlite)})
    )
    assert verdict.status == "verified", verdict


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("DROP TABLE customers", ["'DROP'", "only runs queries that read", "not run"]),
        ("DELETE FROM customers", ["'DELETE'", "not run"]),
        ("SELECT 1; DROP TABLE customers", ["2 statements", "not run"]),
        ("SELECT 1; -- fine\n; DELETE FROM customers; -- gone", ["2 statements"]),
        ("PRAGMA user_version = 7", ["does not allow", "nothing was changed"]),
        ("PRAGMA query_only = OFF", ["does not allow"]),
        ("SELECT load_extension('/tmp/evil')", ["does not allow"]),
    ],
)
def test_a_write_or_a_second_statement_is_refused_on_sqlite(
    crm_sqlite: Path, query: str, words: list[str]
) -> None:
    verdict = verify(
        columns_evidence(query, "x", []), Sources(datasources={"crm": str(crm_sqlite)})
    )
    assert_unverified(verdict, *words)
    assert sqlite_customers(crm_sqlite) == 2
    with sqlite3.connect(crm_sqlite) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (0,)
    connection.close()


@pytest.mark.parametrize(
    ("query", "function"),
    [
        ("SELECT fts3_tokenizer('simple')", "fts3_tokenizer"),
        ("SELECT hex(fts3_tokenizer('simple'))", "fts3_tokenizer"),
        ("SELECT fts3_tokenizer('simple', x'00')", "fts3_tokenizer"),
        ("SELECT load_extension('/tmp/evil')", "load_extension"),
    ],
)
def test_a_function_that_reaches_outside_the_database_is_refused_on_sqlite(
    crm_sqlite: Path, query: str, function: str
) -> None:
    verdict = verify(
        columns_evidence(query, "x", [["x"]]), Sources(datasources={"crm": str(crm_sqlite)})
    )
    assert_unverified(verdict, f"calls {function}()", "does not allow")
    assert "0x" not in verdict.reason  # no native pointer leaks into the claim's reason


def test_attach_is_refused_and_creates_no_file(crm_sqlite: Path, tmp_path: Path) -> None:
    target = tmp_path / "created.sqlite3"
    for query in (f"ATTACH '{target}' AS other", f"SELECT 1; ATTACH '{target}' AS other"):
        verdict = verify(
            columns_evidence(query, "x", []), Sources(datasources={"crm": str(crm_sqlite)})
        )
        assert_unverified(verdict, "not run")
    assert not target.exists()


def test_a_long_query_is_stopped_on_sqlite(crm_sqlite: Path) -> None:
    forever = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    )
    started = time.monotonic()
    verdict = verify(
        columns_evidence(forever, "count(*)", [[1]]),
        Sources(datasources={"crm": str(crm_sqlite)}),
        limits=Limits(query_timeout=0.3),
    )
    assert_unverified(verdict, "ran longer than 0.3 s", "stopped")
    assert time.monotonic() - started < 5


def test_more_rows_than_the_cap_stay_unverified(crm_sqlite: Path) -> None:
    verdict = verify(
        columns_evidence("SELECT name FROM customers", "name", [["Ada"], ["Grace"]]),
        Sources(datasources={"crm": str(crm_sqlite)}),
        limits=Limits(max_rows=1),
    )
    assert_unverified(verdict, "more than 1 rows")


def test_a_value_over_the_size_cap_stays_unverified(crm_sqlite: Path) -> None:
    verdict = verify(
        columns_evidence("SELECT randomblob(5000)", "randomblob(5000)", []),
        Sources(datasources={"crm": str(crm_sqlite)}),
        limits=Limits(max_payload_bytes=1000),
    )
    assert_unverified(verdict, "over 1000 bytes")


def test_an_unknown_data_source_is_named(crm_sqlite: Path) -> None:
    claim = columns_evidence(SEED_QUERY_SQLITE, "name", REAL_COLUMNS, datasource="billing")
    verdict = verify(claim, Sources(datasources={"crm": str(crm_sqlite)}))
    assert_unverified(verdict, "no data source named 'billing'")


def test_a_data_source_must_be_named_when_there_are_several(crm_sqlite: Path) -> None:
    sources = Sources(datasources={"crm": str(crm_sqlite), "billing": str(crm_sqlite)})
    verdict = verify(columns_evidence(SEED_QUERY_SQLITE, "name", REAL_COLUMNS), sources)
    assert_unverified(verdict, "names no data source", "2 are registered")


def test_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.sqlite3"
    verdict = verify(
        columns_evidence("SELECT 1", "1", [[1]]), Sources(datasources={"crm": str(path)})
    )
    assert_unverified(verdict, "no SQLite database file")
    assert not path.exists()


# PostgreSQL data sources ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def crm_postgresql() -> Iterator[str]:
    """A scratch database with a customers table without customer_tier; dropped afterwards."""
    name = f"bulkhead_verifier_test_{os.getpid()}"
    try:
        admin = psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        if os.environ.get("BULKHEAD_REQUIRE_SERVICES") == "1":
            pytest.fail(f"needs PostgreSQL at {ADMIN_DSN}: {error}")
        pytest.skip(f"needs PostgreSQL at {ADMIN_DSN} (set BULKHEAD_TEST_POSTGRES)")
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlsplit(ADMIN_DSN)._replace(path=f"/{name}").geturl()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE customers (id serial PRIMARY KEY, name text, email text)")
        connection.execute(
            "INSERT INTO customers (name, email) VALUES "
            "('Ada', 'ada@example.com'), ('Grace', 'grace@example.com')"
        )
    try:
        yield read_only_dsn(admin, dsn)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def postgresql_customers(dsn: str) -> int:
    with psycopg.connect(dsn) as connection:
        row = connection.execute("SELECT count(*) FROM customers").fetchone()
    assert row is not None
    return int(row[0])


def test_the_invented_customer_tier_column_is_refuted_on_postgresql(crm_postgresql: str) -> None:
    claim = columns_evidence(SEED_QUERY_POSTGRESQL, "column_name", INVENTED_COLUMNS)
    verdict = verify(claim, Sources(datasources={"crm": crm_postgresql}))
    assert verdict.status == "refuted", verdict
    assert verdict.payload == {"columns": ["column_name"], "rows": REAL_COLUMNS}


def test_the_real_columns_are_verified_on_postgresql(crm_postgresql: str) -> None:
    claim = columns_evidence(SEED_QUERY_POSTGRESQL, "column_name", REAL_COLUMNS, datasource="crm")
    verdict = verify(claim, Sources(datasources={"crm": crm_postgresql}))
    assert verdict.status == "verified", verdict.reason
    assert verdict.payload == {"columns": ["column_name"], "rows": REAL_COLUMNS}


def test_an_empty_result_keeps_its_columns(crm_postgresql: str) -> None:
    payload = query_result_payload(columns=["id", "name", "email"], rows=[])
    claim = evidence("query_result", "SELECT * FROM customers WHERE false", payload)
    assert verify(claim, Sources(datasources={"crm": crm_postgresql})).status == "verified"


def test_a_query_on_a_missing_column_is_refuted_on_postgresql(crm_postgresql: str) -> None:
    claim = columns_evidence("SELECT customer_tier FROM customers", "customer_tier", [["gold"]])
    verdict = verify(claim, Sources(datasources={"crm": crm_postgresql}))
    assert verdict.status == "refuted"
    assert verdict.payload is None
    assert 'column "customer_tier" does not exist' in verdict.reason


def test_postgresql_values_follow_the_cell_rules(crm_postgresql: str) -> None:
    query = (
        "SELECT 1.50::numeric AS price, true AS active, 0.1::float8 AS ratio, 0.1::float4 AS r4, "
        "NULL AS note, 'Zürich' AS city, 42::bigint AS big, '\\x01ff'::bytea AS bin, "
        "'2024-05-01 12:00:00+02'::timestamptz AS at, ARRAY[1, 2] AS list, "
        "'{\"a\": 1}'::jsonb AS doc, 'NaN'::float8 AS nan, interval '1 day 2 hours' AS span"
    )
    row = ["1.50", True, 0.1, 0.1, None, "Zürich", 42, b"\x01\xff", "2024-05-01 10:00:00+00"]
    row += ["{1,2}", '{"a": 1}', float("nan"), "1 day 02:00:00"]
    columns = ["price", "active", "ratio", "r4", "note", "city", "big", "bin", "at", "list"]
    columns += ["doc", "nan", "span"]
    payload = query_result_payload(columns=columns, rows=[row])
    verdict = verify(
        evidence("query_result", query, payload), Sources(datasources={"crm": crm_postgresql})
    )
    assert verdict.status == "verified", verdict


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("DROP TABLE customers", ["'DROP'", "not run"]),
        ("drop table customers", ["'DROP'", "not run"]),
        ("/* harmless */ TRUNCATE customers", ["'TRUNCATE'", "not run"]),
        ("INSERT INTO customers (name) VALUES ('Eve')", ["'INSERT'", "not run"]),
        ("COPY customers TO PROGRAM 'touch /tmp/pwned'", ["'COPY'", "not run"]),
        ("SET TRANSACTION READ WRITE", ["'SET'", "not run"]),
        ("SELECT 1; DROP TABLE customers", ["2 statements", "not run"]),
        ("SELECT 1; -- fine\nDELETE FROM customers", ["2 statements"]),
        ("SELECT $$ ; $$; DROP TABLE customers", ["2 statements"]),
        (
            "WITH gone AS (DELETE FROM customers RETURNING id) SELECT count(*) FROM gone",
            ["read-only"],
        ),
        ("SELECT * FROM customers FOR UPDATE", ["tries to write", "nothing was changed"]),
        (
            "SELECT set_config('transaction_read_only', 'off', true)",
            ["set_config", "nothing was run"],
        ),
    ],
)
def test_a_write_or_a_second_statement_is_refused_on_postgresql(
    crm_postgresql: str, query: str, words: list[str]
) -> None:
    verdict = verify(columns_evidence(query, "x", []), Sources(datasources={"crm": crm_postgresql}))
    assert_unverified(verdict, *words)
    assert postgresql_customers(crm_postgresql) == 2


def test_a_long_query_is_stopped_on_postgresql(crm_postgresql: str) -> None:
    started = time.monotonic()
    verdict = verify(
        columns_evidence("SELECT pg_sleep(30)", "pg_sleep", [[""]]),
        Sources(datasources={"crm": crm_postgresql}),
        limits=Limits(query_timeout=0.3),
    )
    assert_unverified(verdict, "ran longer than 0.3 s", "stopped")
    assert time.monotonic() - started < 5


def test_the_row_cap_stops_reading_on_postgresql(crm_postgresql: str) -> None:
    verdict = verify(
        columns_evidence("SELECT generate_series(1, 100000000)", "generate_series", []),
        Sources(datasources={"crm": crm_postgresql}),
        limits=Limits(max_rows=10),
    )
    assert_unverified(verdict, "more than 10 rows")


def test_the_size_cap_stops_reading_on_postgresql(crm_postgresql: str) -> None:
    verdict = verify(
        columns_evidence(
            "SELECT repeat('x', 100000) AS big FROM generate_series(1, 1000)", "big", []
        ),
        Sources(datasources={"crm": crm_postgresql}),
        limits=Limits(max_payload_bytes=1024 * 1024),
    )
    assert_unverified(verdict, "over 1048576 bytes")


@pytest.mark.parametrize(
    ("query", "dialect", "keyword"),
    [
        # PostgreSQL nests comments: the server reads DROP where a flat reading sees SELECT.
        ("/* /* */ SELECT */ DROP TABLE customers", "postgresql", "'DROP'"),
        ("-- SELECT\n ( /* x */ DELETE FROM customers)", "postgresql", "'DELETE'"),
        # SQLite does not: there the comment ends at the first */.
        ("/* /* */ DROP TABLE customers", "sqlite", "'DROP'"),
    ],
)
def test_a_write_behind_a_comment_is_refused_before_it_reaches_the_database(
    tmp_path: Path, query: str, dialect: str, keyword: str
) -> None:
    if dialect == "postgresql":
        target = "postgresql://postgres@127.0.0.1:1/nothing"  # never reached
    else:
        target = str(tmp_path / "crm.sqlite3")
        sqlite3.connect(target).close()
    verdict = verify(columns_evidence(query, "x", []), Sources(datasources={"crm": target}))
    assert_unverified(verdict, keyword, "not run")


def test_an_unreachable_database_stays_unverified() -> None:
    dsn = "postgresql://postgres@127.0.0.1:1/nothing"
    verdict = verify(columns_evidence("SELECT 1", "x", []), Sources(datasources={"crm": dsn}))
    assert_unverified(verdict, "could not connect to data source 'crm'")


# Workspaces: file_read ------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "config").mkdir(parents=True)
    (root / "config" / "pricing.yaml").write_text(PRICING_YAML, encoding="utf-8")
    (tmp_path / "secret.txt").write_text("the outside world\n", encoding="utf-8")
    return root


def pricing_evidence(source: str = "config/pricing.yaml:3-4", **names: str) -> dict[str, Any]:
    payload = file_read_payload(
        path=source.rsplit(":", 1)[0],
        start=3,
        end=4,
        lines=["  loyalty_points_threshold: 500", '  discount: "10%"'],
    )
    return evidence("file_read", source, payload, **names)


def test_lines_that_match_are_verified(workspace: Path) -> None:
    verdict = verify(
        pricing_evidence(workspace="repo"), Sources(workspaces={"repo": str(workspace)})
    )
    assert verdict.status == "verified", verdict.reason
    assert verdict.payload == {
        "path": "config/pricing.yaml",
        "lines": [3, 4],
        "text": '  loyalty_points_threshold: 500\n  discount: "10%"',
    }


def test_lines_that_changed_are_refuted_with_what_the_file_says(workspace: Path) -> None:
    (workspace / "config" / "pricing.yaml").write_text(
        PRICING_YAML.replace("500", "750"), encoding="utf-8"
    )
    verdict = verify(pricing_evidence(), Sources(workspaces={"repo": str(workspace)}))
    assert verdict.status == "refuted"
    assert verdict.payload is not None
    assert "loyalty_points_threshold: 750" in verdict.payload["text"]


def test_lines_past_the_end_are_refuted(workspace: Path) -> None:
    claim = evidence("file_read", "config/pricing.yaml:4-9", {"text": "imagined"})
    verdict = verify(claim, Sources(workspaces={"repo": str(workspace)}))
    assert verdict.status == "refuted"
    assert verdict.payload is None
    assert "has 4 lines" in verdict.reason


def test_a_missing_file_is_refuted(workspace: Path) -> None:
    claim = evidence("file_read", "config/tiers.yaml:1-2", {"text": "imagined"})
    verdict = verify(claim, Sources(workspaces={"repo": str(workspace)}))
    assert verdict == Verdict(
        "refuted", "re-read workspace 'repo': there is no file config/tiers.yaml"
    )


def test_an_absolute_path_inside_the_workspace_is_read(workspace: Path) -> None:
    source = f"{workspace}/config/pricing.yaml:3-4"
    verdict = verify(pricing_evidence(source), Sources(workspaces={"repo": str(workspace)}))
    assert verdict.status == "verified", verdict.reason


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("../../etc/passwd:1-1", ["climbs out with '..'"]),
        ("config/../../secret.txt:1-1", ["climbs out with '..'"]),
        ("/etc/passwd:1-1", ["outside workspace 'repo'"]),
    ],
)
def test_a_path_out_of_the_workspace_is_refused(
    workspace: Path, source: str, words: list[str]
) -> None:
    verdict = verify(
        evidence("file_read", source, {}), Sources(workspaces={"repo": str(workspace)})
    )
    assert_unverified(verdict, *words)


def test_a_link_out_of_the_workspace_is_refused(workspace: Path) -> None:
    (workspace / "notes.txt").symlink_to(workspace.parent / "secret.txt")
    (workspace / "outside").symlink_to(workspace.parent, target_is_directory=True)
    sources = Sources(workspaces={"repo": str(workspace)})
    for source in ("notes.txt:1-1", "outside/secret.txt:1-1"):
        claim = evidence("file_read", source, {"text": "the outside world"})
        assert_unverified(verify(claim, sources), "a link that leaves workspace 'repo'")


def test_a_link_inside_the_workspace_is_followed(workspace: Path) -> None:
    (workspace / "current.yaml").symlink_to(workspace / "config" / "pricing.yaml")
    claim = evidence(
        "file_read",
        "current.yaml:1-1",
        file_read_payload(path="current.yaml", start=1, end=1, lines=["# pricing"]),
    )
    assert verify(claim, Sources(workspaces={"repo": str(workspace)})).status == "verified"


def test_a_file_over_the_size_cap_is_not_read(workspace: Path) -> None:
    verdict = verify(
        pricing_evidence(),
        Sources(workspaces={"repo": str(workspace)}),
        limits=Limits(max_file_bytes=10),
    )
    assert_unverified(verdict, "at most 10 bytes")


def test_a_fifo_is_not_waited_on(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    started = time.monotonic()
    verdict = verify(
        evidence("file_read", "pipe:1-1", {}), Sources(workspaces={"repo": str(workspace)})
    )
    assert_unverified(verdict, "not a regular file")
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("source", ["config:1-1", ".:1-1"])
def test_a_directory_is_not_a_regular_file(workspace: Path, source: str) -> None:
    verdict = verify(
        evidence("file_read", source, {}), Sources(workspaces={"repo": str(workspace)})
    )
    assert_unverified(verdict, "is not a regular file")


def test_a_binary_file_stays_unverified(workspace: Path) -> None:
    (workspace / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    verdict = verify(
        evidence("file_read", "logo.png:1-1", {}), Sources(workspaces={"repo": str(workspace)})
    )
    assert_unverified(verdict, "not UTF-8")


@pytest.mark.parametrize(
    "source", ["config/pricing.yaml", "config/pricing.yaml:3", "x:0-2", "x:5-2"]
)
def test_a_source_without_a_line_range_is_named(workspace: Path, source: str) -> None:
    verdict = verify(
        evidence("file_read", source, {}), Sources(workspaces={"repo": str(workspace)})
    )
    assert_unverified(verdict)
    assert "path:start-end" in verdict.reason or "start <= end" in verdict.reason


def test_an_unknown_workspace_is_named(workspace: Path) -> None:
    verdict = verify(
        pricing_evidence(workspace="docs"), Sources(workspaces={"repo": str(workspace)})
    )
    assert_unverified(verdict, "no workspace named 'docs'")


# Allowed hosts: http_exchange -----------------------------------------------------------------

CUSTOMER_BODY = b'{"id":42,"tier":null}'


@dataclass
class Server:
    port: int
    requests: list[tuple[str, str]] = field(default_factory=list)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def server() -> Iterator[Server]:
    """A real HTTP server on the loopback interface, recording every request it gets."""
    state = Server(port=0)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, status: int, body: bytes, **headers: str) -> None:
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def route(self) -> None:
            state.requests.append((self.command, self.path))
            if self.path == "/customers/42":
                self.reply(200, CUSTOMER_BODY, Content_Type="application/json")
            elif self.path == "/moved":
                self.reply(302, b"", Location="/customers/42")
            elif self.path == "/away":
                self.reply(302, b"", Location=f"http://localhost:{state.port}/customers/42")
            elif self.path == "/compressed":
                self.reply(200, gzip.compress(CUSTOMER_BODY), Content_Encoding="gzip")
            elif self.path == "/large":
                self.reply(200, b"x" * 200_000)
            elif self.path == "/slow":
                time.sleep(2)  # the behaviour under test: a host slower than the read timeout
                self.reply(200, b"late")
            else:
                self.reply(404, b"not found")

        do_GET = do_HEAD = do_POST = do_DELETE = route

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def exchange(
    url: str, status: int = 200, body: bytes = CUSTOMER_BODY, method: str = "GET"
) -> dict[str, Any]:
    payload = http_exchange_payload(
        method=method, url=url, status=status, body_sha256=sha256_hex(body)
    )
    return {**evidence("http_exchange", url, payload), "payload": payload}


def test_a_get_that_matches_is_verified(server: Server) -> None:
    verdict = verify(exchange(server.url("/customers/42")), Sources(hosts=frozenset({server.host})))
    assert verdict.status == "verified", verdict.reason
    assert server.requests == [("GET", "/customers/42")]


def test_a_get_that_differs_is_refuted_with_the_real_response(server: Server) -> None:
    claim = exchange(server.url("/customers/42"), body=b'{"id":42,"tier":"gold"}')
    verdict = verify(claim, Sources(hosts=frozenset({server.host})))
    assert verdict.status == "refuted"
    assert verdict.payload == http_exchange_payload(
        method="GET",
        url=server.url("/customers/42"),
        status=200,
        body_sha256=sha256_hex(CUSTOMER_BODY),
    )


def test_a_head_is_re_fetched_with_an_empty_body(server: Server) -> None:
    claim = exchange(server.url("/customers/42"), body=b"", method="HEAD")
    verdict = verify(claim, Sources(hosts=frozenset({server.host})))
    assert verdict.status == "verified", verdict.reason
    assert server.requests == [("HEAD", "/customers/42")]


def test_the_body_is_hashed_after_its_content_encoding(server: Server) -> None:
    verdict = verify(exchange(server.url("/compressed")), Sources(hosts=frozenset({server.host})))
    assert verdict.status == "verified", verdict.reason


def test_a_redirect_on_the_same_host_is_followed(server: Server) -> None:
    verdict = verify(exchange(server.url("/moved")), Sources(hosts=frozenset({server.host})))
    assert verdict.status == "verified", verdict.reason
    assert server.requests == [("GET", "/moved"), ("GET", "/customers/42")]


def test_a_redirect_to_another_host_is_not_followed(server: Server) -> None:
    hosts = frozenset({server.host, f"localhost:{server.port}"})
    verdict = verify(exchange(server.url("/away")), Sources(hosts=hosts))
    assert_unverified(verdict, "another host")
    assert server.requests == [("GET", "/away")]


@pytest.mark.parametrize("method", ["POST", "DELETE", "put"])
def test_a_method_that_may_change_something_is_not_sent(server: Server, method: str) -> None:
    claim = exchange(server.url("/customers/42"), method=method)
    verdict = verify(claim, Sources(hosts=frozenset({server.host})))
    assert_unverified(verdict, f"a {method.upper()} may change something", "not sent")
    assert server.requests == []


def test_a_host_not_allowed_is_not_fetched(server: Server) -> None:
    for url, hosts in [
        (server.url("/customers/42", host="localhost"), {server.host}),
        (server.url("/customers/42"), {"127.0.0.1"}),  # a bare host allows its default port only
        (server.url("/customers/42"), set()),
    ]:
        verdict = verify(exchange(url), Sources(hosts=frozenset(hosts)))
        assert_unverified(verdict, "is not an allowed host", "not fetched")
    assert server.requests == []


def test_only_http_urls_are_fetched() -> None:
    verdict = verify(exchange("file:///etc/passwd"), Sources(hosts=frozenset({"localhost"})))
    assert_unverified(verdict, "http:// or https://")


def test_a_slow_host_is_given_up_on(server: Server) -> None:
    started = time.monotonic()
    verdict = verify(
        exchange(server.url("/slow"), body=b"late"),
        Sources(hosts=frozenset({server.host})),
        limits=Limits(http_timeout=0.3),
    )
    assert_unverified(verdict, "did not answer within 0.3 s")
    assert time.monotonic() - started < 2


def test_a_body_over_the_cap_is_not_read_to_the_end(server: Server) -> None:
    verdict = verify(
        exchange(server.url("/large"), body=b"x" * 200_000),
        Sources(hosts=frozenset({server.host})),
        limits=Limits(max_body_bytes=1000),
    )
    assert_unverified(verdict, "over 1000 bytes")


# Allowed commands: test_run -------------------------------------------------------------------

PYTHON = shlex.quote(sys.executable)
CHECK_SCRIPT = """\
import sys
sys.stdout.write("2 passed\\n")
sys.stdout.flush()
sys.stderr.write("warning: slow fixture\\n")
sys.stderr.flush()
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""
CHECK_OUTPUT = b"2 passed\nwarning: slow fixture\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "check.py").write_text(CHECK_SCRIPT, encoding="utf-8")
    return root


def run_evidence(command: str, exit_code: int = 0, output: bytes = CHECK_OUTPUT) -> dict[str, Any]:
    payload = run_payload(command=command, exit_code=exit_code, output_sha256=sha256_hex(output))
    return {**evidence("test_run", command, payload), "payload": payload}


def commands(project: Path, *lines: str) -> Sources:
    return Sources(workspaces={"project": str(project)}, commands=frozenset(lines))


def test_a_test_run_that_matches_is_verified(project: Path) -> None:
    command = f"{PYTHON} check.py"
    verdict = verify(run_evidence(command), commands(project, command))
    assert verdict.status == "verified", verdict.reason
    assert verdict.payload == run_payload(
        command=command, exit_code=0, output_sha256=sha256_hex(CHECK_OUTPUT)
    )


def test_a_failing_test_run_refutes_a_claim_that_it_passed(project: Path) -> None:
    command = f"{PYTHON} check.py 1"
    verdict = verify(run_evidence(command, exit_code=0), commands(project, command))
    assert verdict.status == "refuted"
    assert verdict.payload is not None and verdict.payload["exit_code"] == 1
    assert "it exits with 1" in verdict.reason


def test_output_that_differs_is_refuted_and_says_the_exit_code_matched(project: Path) -> None:
    command = f"{PYTHON} check.py"
    claim = run_evidence(command, output=b"2 passed in 0.12s\n")
    verdict = verify(claim, commands(project, command))
    assert verdict.status == "refuted"
    assert "exits with 0, as claimed, but its output differs" in verdict.reason


def test_a_command_not_allowed_is_not_run(project: Path) -> None:
    command = f"{PYTHON} -c \"open('pwned', 'w')\""
    verdict = verify(run_evidence(command), commands(project, f"{PYTHON} check.py"))
    assert_unverified(verdict, "not one of the fleet's allowed test commands", "not run")
    assert not (project / "pwned").exists()


def test_a_command_must_match_a_registered_line_exactly(project: Path) -> None:
    for command in (
        f"{PYTHON} check.py; touch pwned",
        f"{PYTHON}  check.py",
        f"{PYTHON} check.py 2",
    ):
        verdict = verify(run_evidence(command), commands(project, f"{PYTHON} check.py"))
        assert_unverified(verdict, "not run")
    assert not (project / "pwned").exists()


def test_a_command_runs_without_a_shell(project: Path) -> None:
    command = "echo hi; touch pwned $(touch pwned2)"
    claim = run_evidence(command, output=b"hi; touch pwned $(touch pwned2)\n")
    assert verify(claim, commands(project, command)).status == "verified"
    assert not (project / "pwned").exists()
    assert not (project / "pwned2").exists()


def test_a_command_gets_none_of_the_verifiers_secrets(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BULKHEAD_SECRET", "hunter2")
    command = f"{PYTHON} -c \"import os; print(os.environ.get('BULKHEAD_SECRET'), os.getcwd())\""
    claim = run_evidence(command, output=f"None {project.resolve()}\n".encode())
    assert verify(claim, commands(project, command)).status == "verified"


def test_a_command_killed_by_a_signal_exits_like_in_a_shell(project: Path) -> None:
    command = f'{PYTHON} -c "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"'
    verdict = verify(run_evidence(command, exit_code=143, output=b""), commands(project, command))
    assert verdict.status == "verified", verdict.reason


def test_a_command_that_runs_too_long_is_stopped(project: Path) -> None:
    # Its sleep is the behaviour under test: a command that outlasts the limit.
    command = f'{PYTHON} -c "import time; time.sleep(30)"'
    started = time.monotonic()
    verdict = verify(
        run_evidence(command), commands(project, command), limits=Limits(command_timeout=0.5)
    )
    assert_unverified(verdict, "did not finish within 0.5 s", "stopped")
    assert time.monotonic() - started < 5


def test_background_work_left_behind_does_not_hold_the_verdict(project: Path) -> None:
    # The child's sleep is the behaviour under test: work that outlives the command.
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); print('done')"
    command = f"{PYTHON} -c {shlex.quote(script)}"
    started = time.monotonic()
    verdict = verify(run_evidence(command, output=b"done\n"), commands(project, command))
    assert verdict.status == "verified", verdict.reason
    assert time.monotonic() - started < 10


def test_output_over_the_cap_is_stopped(project: Path) -> None:
    command = f"{PYTHON} -c \"print('x' * 100000)\""
    verdict = verify(
        run_evidence(command), commands(project, command), limits=Limits(max_output_bytes=1000)
    )
    assert_unverified(verdict, "more than 1000 bytes")


def test_a_command_that_cannot_start_stays_unverified(project: Path) -> None:
    command = "no-such-test-runner --all"
    assert_unverified(verify(run_evidence(command), commands(project, command)), "could not start")


def test_a_test_run_needs_a_workspace(project: Path) -> None:
    command = f"{PYTHON} check.py"
    verdict = verify(run_evidence(command), Sources(commands=frozenset({command})))
    assert_unverified(verdict, "names no workspace", "none is registered")


def test_a_superuser_data_source_is_not_queried(crm_postgresql: str) -> None:
    superuser = (
        urlsplit(crm_postgresql)._replace(netloc=urlsplit(ADMIN_DSN).netloc).geturl()
    )  # the same database, as the admin role
    verdict = verify(
        columns_evidence("SELECT pg_read_file('/etc/hostname')", "x", [["x"]]),
        Sources(datasources={"crm": superuser}),
    )
    assert_unverified(verdict, "was not queried", "superuser", "read-only role")


@pytest.mark.parametrize(
    ("query", "function"),
    [
        ("SELECT pg_read_file('/etc/hostname')", "pg_read_file"),
        ("SELECT pg_ls_dir('.')", "pg_ls_dir"),
        ("SELECT pg_terminate_backend(1)", "pg_terminate_backend"),
        ("SELECT pg_cancel_backend(1) AS x", "pg_cancel_backend"),
        ("SELECT pg_catalog.pg_terminate_backend(1) AS x", "pg_terminate_backend"),
        ('SELECT U&"pg_terminate_backen\\0064"(1) AS x', "pg_terminate_backend"),
        ("SELECT x FROM pg_ls_dir('.') AS x", "pg_ls_dir"),
        ("SELECT query_to_xml('SELECT 1', true, true, '') AS x", "query_to_xml"),
        ("SELECT 1 AS x WHERE pg_advisory_lock(1) IS NOT NULL", "pg_advisory_lock"),
    ],
)
def test_a_probe_outside_the_data_is_refused_naming_the_function(
    crm_postgresql: str, query: str, function: str
) -> None:
    verdict = verify(
        columns_evidence(query, "x", [["x"]]), Sources(datasources={"crm": crm_postgresql})
    )
    assert verdict.status != "verified", verdict
    assert function in verdict.reason, verdict.reason
    if function not in {"pg_read_file", "pg_ls_dir"}:  # refused by PostgreSQL itself, or by us
        assert "does not allow" in verdict.reason and "nothing was run" in verdict.reason


def test_a_function_named_inside_a_string_is_not_a_call(crm_postgresql: str) -> None:
    query = "SELECT 'pg_read_file(x)' AS x"
    verdict = verify(
        columns_evidence(query, "x", [["pg_read_file(x)"]]),
        Sources(datasources={"crm": crm_postgresql}),
    )
    assert verdict.status == "verified", verdict


@pytest.mark.parametrize("path", ["/customers/42", "/moved", "/compressed"])
def test_the_python_clients_exchange_is_what_the_verifier_re_fetches(
    server: Server, path: str
) -> None:
    """The client's `http_exchange` helper makes the request as the verifier re-makes it: a
    redirect on the host followed (before, the client hashed the 302 and a true claim was
    refuted), the body after its Content-Encoding."""
    from bulkhead_client.evidence import http_exchange

    _, handed_over = http_exchange(server.url(path))
    claim = handed_over.model_dump(exclude_none=True)
    verdict = verify(claim, Sources(hosts=frozenset({server.host})))
    assert verdict.status == "verified", verdict.reason


# Whether evidence could be re-checked at all, by the verifiers' own first step (the reports'
# "checkable evidence"): nothing is run, read or fetched.

REACHABLE_SOURCES = Sources(
    datasources={"orders": "/nonexistent/orders.sqlite3"},
    workspaces={"repo": "/nonexistent/repo"},
    hosts=frozenset({"api.example.com"}),
    commands=frozenset({"pytest -q"}),
)
GET = {"request": {"method": "GET", "url": "https://api.example.com/v1"}}


@pytest.mark.parametrize(
    ("evidence_", "why"),
    [
        ({"kind": "query_result", "source": SEED_QUERY_SQLITE, "datasource": "orders"}, None),
        (
            {"kind": "query_result", "source": SEED_QUERY_SQLITE, "datasource": "nosuch"},
            "no data source named 'nosuch' is registered",
        ),
        (
            {"kind": "query_result", "source": "DELETE FROM customers", "datasource": "orders"},
            "only runs queries that read",
        ),
        ({"kind": "file_read", "source": "a.yaml:1-2", "workspace": "repo"}, None),
        (
            {"kind": "file_read", "source": "a.yaml:1-2", "workspace": "elsewhere"},
            "no workspace named 'elsewhere'",
        ),
        ({"kind": "test_run", "source": "pytest -q", "workspace": "repo"}, None),
        ({"kind": "test_run", "source": "make deploy", "workspace": "repo"}, "allowed test"),
        ({"kind": "http_exchange", "source": "https://api.example.com/v1", "payload": GET}, None),
        (
            {"kind": "http_exchange", "source": "https://evil.example/v1", "payload": GET},
            "not an allowed host",
        ),
        (
            {
                "kind": "http_exchange",
                "source": "https://api.example.com/v1",
                "payload": {"request": {"method": "POST"}},
            },
            "only GET and HEAD",
        ),
        ({"kind": "query_result", "source": "agent:planner", "datasource": "orders"}, "agent"),
    ],
)
def test_it_says_whether_evidence_could_be_re_checked_without_running_it(evidence_, why):
    found = unreachable({"payload_hash": "sha256:" + "0" * 64, **evidence_}, REACHABLE_SOURCES)

    if why is None:
        assert found is None
    else:
        assert found is not None and why in found, found
