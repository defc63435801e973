"""The TypeScript client (clients/typescript): installed from the repository with `npm ci`,
compiled with `tsc`, its unit tests and end-to-end tests run with node's test runner, the
end-to-end ones (a run, and a batch) against the live app; its generated types are the server's
OpenAPI document; its canonical JSON hashes as the server's."""

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
from django.test import Client

from escalations.models import Escalation
from fleet import services
from fleet.models import Event
from fleet.stories import all_green
from runs.claims.hashing import payload_hash
from runs.models import Claim, Run
from tests.clients.conftest import ROOT, credentials
from tests.clients.proxy import LosingProxy
from tests.conftest import eventually

CLIENT = ROOT / "clients" / "typescript"


def npm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["npm", *args], cwd=CLIENT, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def built() -> Path:
    """The client installed from its package-lock (npm ci, unless `make install` did) and
    compiled with tsc."""
    lock = CLIENT / "package-lock.json"
    marker = CLIENT / "node_modules" / ".installed"
    if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
        done = npm("ci", "--no-audit", "--no-fund", "--loglevel=error")
        assert done.returncode == 0, done.stderr
        marker.touch()
    done = npm("run", "build")
    assert done.returncode == 0, done.stdout + done.stderr
    return CLIENT / "dist"


def node_test(path: Path, env: dict[str, str] | None = None, timeout: float = 180) -> str:
    done = subprocess.run(
        ["node", "--test", str(path)],
        cwd=CLIENT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "# fail 0" in output and "# skipped 0" in output, output
    return output


def test_the_typescript_unit_tests_pass(built):
    output = node_test(built / "test" / "unit.test.js")
    assert "# pass 19" in output, output


def test_its_types_are_generated_from_the_servers_openapi_document(built, tmp_path):
    served = Client().get("/api/v1/openapi.json").json()
    kept = json.loads((CLIENT / "openapi.json").read_text())
    assert kept == served, (
        "the API changed: run make client-types (it saves /api/v1/openapi.json to clients/typescript/ and regenerates the types)"
    )
    out = tmp_path / "schema.ts"
    done = subprocess.run(
        ["npx", "openapi-typescript", "openapi.json", "--default-non-nullable", "false", "-o", str(out)],
        cwd=CLIENT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_text() == (CLIENT / "src" / "schema.ts").read_text()


CONSUMER = """
import { Bulkhead } from "@bulkhead/client";
const bh = new Bulkhead({ endpoint: "http://127.0.0.1:1/hooks/v1/agents/1/events", secret: "whsec_x" });
export async function careless(): Promise<void> {
  await bh.send("task.finished", { run: "r", task: "t", outcome: "succeeded" });
  // @ts-expect-error: not an outcome
  await bh.send("task.finished", { run: "r", task: "t", outcome: "done-ish" });
  // @ts-expect-error: a task's key is a string
  await bh.declareRun("x", [{ key: 1 }]);
  // @ts-expect-error: ready is a list of task keys
  const n: number = (await bh.frontier("x")).ready;
  void n;
}
"""


def test_a_project_that_installs_the_package_gets_its_types(built, tmp_path):
    """The package as npm packs it, installed into a strict project that checks libraries: the
    generated types reach it (a wrong outcome, key or field does not compile). Before, the
    package's declarations imported a schema tsc never emitted: an error, or with
    `skipLibCheck` every type silently `any`."""
    done = npm("pack", "--ignore-scripts", "--pack-destination", str(tmp_path), "--silent")
    assert done.returncode == 0, done.stderr
    with tarfile.open(tmp_path / done.stdout.split()[-1]) as packed:
        packed.extractall(tmp_path / "unpacked", filter="data")
    scope = tmp_path / "app" / "node_modules" / "@bulkhead"
    scope.mkdir(parents=True)
    (tmp_path / "unpacked" / "package").rename(scope / "client")
    app = tmp_path / "app"
    (app / "package.json").write_text('{"name": "consumer", "private": true, "type": "module"}')
    options = {
        "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "strict": True,
        "noEmit": True, "skipLibCheck": False, "types": ["node"],
        "typeRoots": [str(CLIENT / "node_modules" / "@types")],
    }  # fmt: skip
    (app / "tsconfig.json").write_text(
        json.dumps({"compilerOptions": options, "include": ["main.ts"]})
    )
    (app / "main.ts").write_text(CONSUMER)
    done = subprocess.run(
        [str(CLIENT / "node_modules" / ".bin" / "tsc"), "-p", "."], cwd=app, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_its_canonical_json_hashes_as_the_servers(built, tmp_path):
    values = [
        {"columns": ["column_name"], "rows": [["id"], ["loyalty_points"]]},
        {"z": 1, "a": [0.1, 1e-05, 0.0001, 1e16, 1e21, -2.5e-07, 12345678.9, 1.5e300]},
        {
            "é": "Zürich",
            "\U0001f600": "emoji key",
            "\ue000": "private use",
            "ctl": "\x00\x1f\t\n\u2028/",
        },
        {"big": 12345678901234567890, "neg": -0.0, "nested": {"b": [True, False, None], "a": {}}},
        [1.0, 2.50, 100.0, 3.0e-300],
    ]
    text = json.dumps(values, ensure_ascii=False)
    (tmp_path / "values.json").write_text(text, encoding="utf-8")
    script = (
        "import { payloadHash } from './dist/src/index.js'; import { readFileSync } from 'node:fs';"
        f"const values = JSON.parse(readFileSync({json.dumps(str(tmp_path / 'values.json'))}, 'utf8'));"
        "console.log(JSON.stringify(values.map((v) => [JSON.stringify(v), payloadHash(v)])));"
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script], cwd=CLIENT, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The server hashes the payload it receives: what the client sends (JSON.stringify) read back.
    found = json.loads(done.stdout)
    assert len(found) == len(values)
    for sent, hashed in found:
        assert hashed == payload_hash(json.loads(sent)), sent
    assert found[0][1] == payload_hash(values[0])


@pytest.mark.postgres
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_typescript_client_against_a_live_bulkhead(built, live_app, tmp_path):
    fleet = services.fleet_create(name="acme")
    orch = credentials(live_app, fleet, "orch", orchestrator=True)
    credentials(live_app, fleet, "planner")
    credentials(live_app, fleet, "coder")
    orders = tmp_path / "orders.sqlite3"
    all_green.build_orders(orders)
    workspace = tmp_path / "shop"
    all_green.build_workspace(workspace)
    services.source_add(fleet=fleet, kind="datasource", name="orders", value=str(orders))
    services.source_add(fleet=fleet, kind="workspace", name="shop", value=str(workspace))
    proxy = LosingProxy(live_app.url, lambda path, headers, body: not proxy.seen)
    env = {
        "BULKHEAD_ENDPOINT": orch.endpoint,
        "BULKHEAD_PROXY_ENDPOINT": orch.endpoint.replace(live_app.url, proxy.url),
        "BULKHEAD_SECRET": orch.secret,
        "BULKHEAD_TOKEN": orch.token,
        "WORKSPACE": str(workspace),
        "ORDERS_COLUMNS": json.dumps(all_green.REAL_COLUMNS),
        "ANSWER": all_green.ANSWER,
    }
    log = tmp_path / "node.log"
    with open(log, "w") as out:
        node = subprocess.Popen(
            ["node", "--test", str(built / "test" / "live.test.js")],
            cwd=CLIENT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        escalation = eventually(
            lambda: Escalation.objects.filter(task__key="ask", status="open").first(),
            timeout=90,
            what="the TypeScript client's packet:\n" + log.read_text(),
        )
        alice, _ = services.member_add(username="alice", fleet=fleet, role="reviewer")
        browser = Client()
        browser.force_login(alice)
        response = browser.post(f"/escalations/{escalation.pk}/answer/", {"text": all_green.ANSWER})
        assert response.status_code == 302
        node.wait(timeout=120)
    finally:
        proxy.stop()
        if node.poll() is None:
            node.kill()
    output = log.read_text()
    assert node.returncode == 0, output
    assert "# pass 1" in output and "# fail 0" in output, output
    # The lost answer: the same webhook-id, timestamp and body again, applied once.
    first, again = proxy.seen[:2]
    assert (first.answered, again.answered) == (503, 202)
    assert (first.headers["webhook-id"], first.headers["webhook-timestamp"], first.body) == (
        again.headers["webhook-id"], again.headers["webhook-timestamp"], again.body
    )  # fmt: skip
    assert Event.objects.filter(webhook_id=first.headers["webhook-id"]).count() == 1


@pytest.mark.postgres
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_typescript_batch_is_applied_once_through_a_lost_answer(built, live_app):
    fleet = services.fleet_create(name="acme")
    orch = credentials(live_app, fleet, "orch", orchestrator=True)
    credentials(live_app, fleet, "planner")
    proxy = LosingProxy(
        live_app.url, lambda path, headers, body: path.endswith("/batches") and not proxy.seen
    )
    env = {
        "BULKHEAD_ENDPOINT": orch.endpoint,
        "BULKHEAD_PROXY_ENDPOINT": orch.endpoint.replace(live_app.url, proxy.url),
        "BULKHEAD_SECRET": orch.secret,
        "BULKHEAD_TOKEN": orch.token,
    }
    try:
        output = node_test(built / "test" / "batches.live.test.js", env)
    finally:
        proxy.stop()
    assert "# pass 1" in output, output
    # The lost answer: the same batch again (webhook-id, timestamp, body), each event applied once.
    first, again = proxy.seen
    batches = orch.endpoint.removeprefix(live_app.url).replace("/events", "/batches")
    assert (first.path, first.answered, again.answered) == (batches, 503, 200)
    assert (first.headers["webhook-id"], first.headers["webhook-timestamp"], first.body) == (
        again.headers["webhook-id"], again.headers["webhook-timestamp"], again.body
    )  # fmt: skip
    assert [e["id"] for e in json.loads(first.body)["events"]] == [
        "ts_batch_claim", "ts_batch_a", "ts_batch_b"
    ]  # fmt: skip
    for event_id in ("ts_batch_claim", "ts_batch_a", "ts_batch_b"):
        assert Event.objects.filter(webhook_id=event_id).count() == 1
    assert Claim.objects.filter(key="a.k").count() == 1
    assert set(Run.objects.get(key="ts-batch").tasks.values_list("state", flat=True)) == {
        "succeeded"
    }


@pytest.mark.postgres
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_readmes_typescript_quick_start_runs_a_first_task(built, live_app):
    [code] = re.findall(r"```ts\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    fleet = services.fleet_create(name="acme")
    planner = credentials(live_app, fleet, "planner")
    code = (
        code.replace('"@bulkhead/client"', '"./dist/src/index.js"')
        .replace("http://127.0.0.1:8000/hooks/v1/agents/<id>/events", planner.endpoint)
        .replace('secret: "whsec_…"', f'secret: "{planner.secret}"')
        .replace('token: "bhk_…"', f'token: "{planner.token}"')
    )
    assert len([line for line in code.splitlines() if line.strip()]) <= 10, "a ten-line start"
    script = CLIENT / "dist" / "readme-quick-start.mjs"
    script.write_text(code.replace("./dist/src/index.js", "./src/index.js"))
    done = subprocess.run(
        ["node", str(script)], cwd=CLIENT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[ 'step-0' ]"]
    assert Run.objects.get(key="first-run-ts").tasks.get(key="step-0").state == "succeeded"


@pytest.mark.postgres
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_clients_readme_example_runs_as_an_es_module(built, live_app):
    [code] = re.findall(r"```js\n(.*?)```", (CLIENT / "README.md").read_text(), re.S)
    fleet = services.fleet_create(name="acme")
    planner = credentials(live_app, fleet, "planner")
    code = (
        code.replace('"@bulkhead/client"', '"./src/index.js"')
        .replace("http://127.0.0.1:8000/hooks/v1/agents/<id>/events", planner.endpoint)
        .replace('secret: "whsec_…"', f'secret: "{planner.secret}"')
        .replace('token: "bhk_…"', f'token: "{planner.token}"')
    )
    script = CLIENT / "dist" / "readme-client-example.mjs"
    script.write_text(code)
    done = subprocess.run(
        ["node", str(script)], cwd=CLIENT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[ 'hello' ]"]
    assert Run.objects.get(key="hello-run").tasks.get(key="hello").state == "pending"


@pytest.mark.postgres
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_clients_readme_batch_example_compiles_and_runs(built, live_app):
    [code] = re.findall(r"```ts\n(.*?)```", (CLIENT / "README.md").read_text(), re.S)
    fleet = services.fleet_create(name="acme")
    planner = credentials(live_app, fleet, "planner")
    code = (
        code.replace('"@bulkhead/client"', '"./src/index.js"')
        .replace("http://127.0.0.1:8000/hooks/v1/agents/<id>/events", planner.endpoint)
        .replace('secret: "whsec_…"', f'secret: "{planner.secret}"')
        .replace('token: "bhk_…"', f'token: "{planner.token}"')
    )
    script = CLIENT / "dist" / "readme-batches.ts"
    script.write_text(code)
    done = subprocess.run(
        ["npx", "tsc", "--strict", "--target", "es2022", "--module", "nodenext",
         "--moduleResolution", "nodenext", "--types", "node", "--skipLibCheck", str(script)],
        cwd=CLIENT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        ["node", str(script.with_suffix(".js"))],
        cwd=CLIENT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[ 202, 202 ] true"]
    assert Run.objects.get(key="batch-run").tasks.get(key="count").state == "succeeded"
    assert Claim.objects.filter(key="count.rows").count() == 1
