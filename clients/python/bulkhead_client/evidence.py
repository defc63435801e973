"""Do the check, and hand over what reality said as evidence hashed the canonical way.

Each helper runs the check the way Bulkhead's verifier re-runs it, so that the re-check matches:
a read-only query on a DB-API connection, a file's lines, a test command (stdout and stderr as
one stream), an HTTP exchange (the body after Content-Encoding is undone).
"""

import hashlib
import shlex
import sqlite3
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bulkhead_client.canonical import (
    file_read_payload,
    http_exchange_payload,
    payload_hash,
    query_result_payload,
    sha256_hex,
    split_lines,
    test_run_payload,
)
from bulkhead_client.events import Evidence

__all__ = ["TestRun", "file_lines", "http_exchange", "query", "test_command"]


def query(
    connection: Any,
    sql: str,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
    *,
    datasource: str | None = None,
) -> Evidence:
    """Run one read-only query on a DB-API 2 connection (sqlite3, psycopg, ...) and return its
    rows as `query_result` evidence. `datasource` names the fleet's registered data source the
    verifier re-runs it on (it may be left out when the fleet has one).

    The query runs read-only: SQLite with `PRAGMA query_only`, any other database inside a
    `SET TRANSACTION READ ONLY` transaction that is rolled back. Select dates, decimals and UUIDs
    as text (`::text`): that is how the verifier reads them.
    """
    is_sqlite = isinstance(connection, sqlite3.Connection)
    cursor = connection.cursor()
    try:
        if is_sqlite:
            previous = connection.execute("PRAGMA query_only").fetchone()[0]
            connection.execute("PRAGMA query_only = ON")
        else:
            connection.rollback()  # a fresh transaction, so that READ ONLY applies to it
            cursor.execute("SET TRANSACTION READ ONLY")
        try:
            cursor.execute(sql, params) if params is not None else cursor.execute(sql)
            columns = [column[0] for column in cursor.description or []]
            rows = cursor.fetchall()
        finally:
            if is_sqlite:
                connection.execute(f"PRAGMA query_only = {int(previous)}")
            else:
                connection.rollback()
    finally:
        cursor.close()
    payload = query_result_payload(columns=columns, rows=rows)
    return Evidence(
        kind="query_result",
        source=sql,
        payload_hash=payload_hash(payload),
        payload=payload,
        datasource=datasource,
    )


def file_lines(
    path: str | Path,
    start: int,
    end: int | None = None,
    *,
    root: str | Path | None = None,
    workspace: str | None = None,
) -> Evidence:
    """Lines `start`..`end` (1-based, inclusive; `end` defaults to `start`) of a file, as
    `file_read` evidence. `root` is the workspace's directory: the source names the path
    relative to it (`config/pricing.yaml:3-4`), as the verifier reads it under `workspace`."""
    end = start if end is None else end
    full = Path(root, path) if root is not None else Path(path)
    named = Path(path).as_posix() if root is not None else full.as_posix()
    if root is not None and Path(path).is_absolute():
        named = Path(path).relative_to(Path(root)).as_posix()
        full = Path(path)
    lines = split_lines(full.read_bytes().decode("utf-8"))
    if end > len(lines):
        raise ValueError(f"{named} has {len(lines)} lines, so lines {start}-{end} do not exist")
    payload = file_read_payload(path=named, start=start, end=end, lines=lines[start - 1 : end])
    return Evidence(
        kind="file_read",
        source=f"{named}:{start}-{end}",
        payload_hash=payload_hash(payload),
        payload=payload,
        workspace=workspace,
    )


@dataclass(frozen=True)
class TestRun:
    """A test command's run: its exit code, its output, and the evidence for it."""

    __test__ = False  # not a pytest test class

    exit_code: int
    output: bytes
    evidence: Evidence

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def test_command(
    command: str,
    *,
    cwd: str | Path | None = None,
    workspace: str | None = None,
    timeout: float = 600.0,
    env: Mapping[str, str] | None = None,
) -> TestRun:
    """Run a test command line (split like a shell's words, no shell) in `cwd` with stdout and
    stderr as one stream, and return its run with `test_run` evidence. The verifier re-runs the
    same command line, which must be one of the fleet's allowed commands, in the workspace; the
    output hash covers every byte, so a command whose output holds timings will not match."""
    default_env = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC"}
    if env is None:
        import os

        env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ} | default_env
    completed = subprocess.run(  # noqa: S603 - the agent's own test command
        shlex.split(command),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        check=False,
    )
    code = completed.returncode
    exit_code = 128 - code if code < 0 else code
    payload = test_run_payload(
        command=command, exit_code=exit_code, output_sha256=sha256_hex(completed.stdout)
    )
    evidence = Evidence(
        kind="test_run",
        source=command,
        payload_hash=payload_hash(payload),
        payload=payload,
        workspace=workspace,
    )
    return TestRun(exit_code=exit_code, output=completed.stdout, evidence=evidence)


test_command.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


MAX_REDIRECTS = 5  # as the verifier


def http_exchange(
    url: str, *, method: str = "GET", client: httpx.Client | None = None
) -> tuple[httpx.Response, Evidence]:
    """Make the request as the verifier re-makes it and return the final response with
    `http_exchange` evidence: its status and the SHA-256 of its body after Content-Encoding is
    undone. Redirects are followed to the same host only (at most 5, the method kept); one to
    another host, or more than 5, is a `ValueError`: the verifier would not follow it, so the
    exchange could never be checked."""
    owned = client is None
    http = client or httpx.Client(follow_redirects=False, trust_env=False)
    target = httpx.URL(url)
    try:
        for _ in range(MAX_REDIRECTS + 1):
            response = http.request(method.upper(), target, follow_redirects=False)
            if not response.is_redirect:
                break
            target = target.join(response.headers["location"])
            if target.host != httpx.URL(url).host:
                raise ValueError(
                    f"{url} redirects to {target}, another host: Bulkhead's verifier does not "
                    "follow redirects off the host, so this exchange cannot be evidence; "
                    "request the final URL instead"
                )
        else:
            raise ValueError(f"{url} redirects more than {MAX_REDIRECTS} times")
        digest = hashlib.sha256(response.content).hexdigest()
    finally:
        if owned:
            http.close()
    payload = http_exchange_payload(
        method=method, url=url, status=response.status_code, body_sha256=digest
    )
    return response, Evidence(
        kind="http_exchange", source=url, payload_hash=payload_hash(payload), payload=payload
    )
