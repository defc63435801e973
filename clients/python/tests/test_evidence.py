"""The evidence helpers run the check and hash it; the worked examples of the README."""

import hashlib
import sqlite3
import sys

import pytest

from bulkhead_client.canonical import canonical_json, payload_hash
from bulkhead_client.evidence import file_lines, http_exchange, query, test_command


def test_the_readmes_worked_example_hashes_as_documented():
    payload = {
        "columns": ["column_name"],
        "rows": [["id"], ["name"], ["email"], ["loyalty_points"]],
    }
    assert payload_hash(payload) == (
        "sha256:a78a387c228fd00996f3c56b3bc237b91eafd6c8720ff34bac9b49fe1c4afaf8"
    )
    assert canonical_json({"b": "é", "a": [1, 2.5]}) == '{"a":[1,2.5],"b":"é"}'.encode()
    with pytest.raises(ValueError, match="NaN"):
        payload_hash({"x": float("nan")})


def test_a_query_is_run_read_only_and_its_rows_hashed(tmp_path):
    db = sqlite3.connect(tmp_path / "orders.sqlite3")
    db.execute("CREATE TABLE customers (id INTEGER, name TEXT, loyalty_points INTEGER, photo BLOB)")
    db.execute("INSERT INTO customers VALUES (1, 'Ada', 1200, x'ff00')")
    db.commit()
    evidence = query(db, "SELECT * FROM customers", datasource="orders")
    assert evidence.payload == {
        "columns": ["id", "name", "loyalty_points", "photo"], "rows": [[1, "Ada", 1200, "\\xff00"]]
    }  # fmt: skip
    assert evidence.payload_hash == payload_hash(evidence.payload)
    assert (evidence.kind, evidence.datasource) == ("query_result", "orders")
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        query(db, "DELETE FROM customers")
    db.execute("INSERT INTO customers VALUES (2, 'Grace', 300, NULL)")  # writable again after
    with pytest.raises(TypeError, match="select it as text"):
        db.execute("CREATE TABLE t (x)")
        from decimal import Decimal

        class Fake:
            description = [("x",)]

            def execute(self, *args): ...
            def fetchall(self):
                return [(Decimal("1.5"),)]

            def close(self): ...

        class Conn:
            def cursor(self):
                return Fake()

            def rollback(self): ...

        query(Conn(), "SELECT x")


def test_file_lines_name_the_path_in_the_workspace(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "pricing.yaml").write_text(
        '# tiers\ndiscounts:\n  loyalty_points_threshold: 500\n  discount: "10%"\n'
    )
    evidence = file_lines("config/pricing.yaml", 3, 4, root=tmp_path)
    assert evidence.source == "config/pricing.yaml:3-4"
    assert (
        evidence.payload_hash
        == "sha256:89f41764e6d67266a998f03beb579e0fca034239ebd03527edc02221bf78eac7"
    )
    with pytest.raises(ValueError, match="has 4 lines"):
        file_lines("config/pricing.yaml", 4, 5, root=tmp_path)


def test_a_test_command_hashes_its_output_as_one_stream(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("import sys\nprint('..')\nprint('2 passed', file=sys.stderr)\nsys.exit(0)\n")
    run = test_command(f"{sys.executable} t.py", cwd=tmp_path)
    assert run.passed and run.exit_code == 0
    assert run.evidence.payload["output_sha256"] == hashlib.sha256(run.output).hexdigest()
    assert b"2 passed" in run.output
    failing = test_command(f"{sys.executable} -c 'raise SystemExit(3)'", cwd=tmp_path)
    assert failing.exit_code == 3 and not failing.passed


def test_an_http_exchange_records_the_status_and_body_hash(fake):
    fake.script = [(200, {}, {"id": 42, "tier": None})]
    response, evidence = http_exchange(f"{fake.base}/v1/customers/42")
    assert evidence.payload == {
        "request": {"method": "GET", "url": f"{fake.base}/v1/customers/42"},
        "response": {"status": 200, "body_sha256": hashlib.sha256(response.content).hexdigest()},
    }


def test_an_http_exchange_follows_a_redirect_on_the_same_host_as_the_verifier(fake):
    final = {"id": 42, "tier": None}
    fake.script = [(301, {"location": "/v1/customers/42/"}, {}), (200, {}, final)]
    response, evidence = http_exchange(f"{fake.base}/v1/customers/42")
    assert [seen.path for seen in fake.seen] == ["/v1/customers/42", "/v1/customers/42/"]
    assert evidence.payload == {
        "request": {"method": "GET", "url": f"{fake.base}/v1/customers/42"},
        "response": {"status": 200, "body_sha256": hashlib.sha256(response.content).hexdigest()},
    }


def test_an_http_exchange_redirected_off_the_host_cannot_be_evidence(fake):
    port = fake.server.server_address[1]
    fake.script = [(302, {"location": f"http://localhost:{port}/elsewhere"}, {})]
    with pytest.raises(ValueError, match="another host: Bulkhead's verifier does not follow"):
        http_exchange(f"{fake.base}/v1/customers/42")
    assert [seen.path for seen in fake.seen] == ["/v1/customers/42"]
    fake.seen.clear()
    fake.script = [(302, {"location": f"/hop-{n}"}, {}) for n in range(6)]
    with pytest.raises(ValueError, match="redirects more than 5 times"):
        http_exchange(f"{fake.base}/start")
    assert len(fake.seen) == 6
