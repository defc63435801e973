// Batches end to end against a live Bulkhead (the suite's tests/clients/test_typescript_client.py
// starts it and passes the environment; its proxy loses the answer to the first batch, so the
// client sends the same batch again): the events applied once, a refused event's BatchRefused.
import assert from "node:assert/strict";
import { test } from "node:test";

import { BatchRefused, Bulkhead } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: the suite's test_typescript_client.py runs this file`);
  return value;
}

test("non-gating events go to a live Bulkhead in one batch, applied once through a lost answer", async () => {
  const secret = env("BULKHEAD_SECRET");
  const token = env("BULKHEAD_TOKEN");
  const bh = new Bulkhead({ endpoint: env("BULKHEAD_ENDPOINT"), secret, token });
  await bh.declareRun("ts-batch", [{ key: "a", agent: "planner" }, { key: "b", agent: "planner" }]);
  for (const key of ["a", "b"]) await bh.start("ts-batch", key, { prompt_hash: "p", context_hash: "c" }, { agent: "planner" });

  const viaProxy = new Bulkhead({ endpoint: env("BULKHEAD_PROXY_ENDPOINT"), secret, token, retry: { baseDelayMs: 10 } });
  const batch = viaProxy.batch();
  const ids = [
    batch.add("claim.posted", { run: "ts-batch", task: "a", agent: "planner", claim: { key: "a.k", statement: "`x` holds" } }, { id: "ts_batch_claim" }),
    ...["a", "b"].map((key) => batch.add("task.finished", { run: "ts-batch", task: key, agent: "planner", outcome: "succeeded" }, { id: `ts_batch_${key}` })),
  ];
  const results = await batch.flush();
  assert.deepEqual(results.map((r) => [r.id, r.status]), ids.map((id) => [id, 202]));
  const run = await bh.runDetail("ts-batch");
  assert.deepEqual(run.tasks.map((t) => [t.key, t.state]).sort(), [["a", "succeeded"], ["b", "succeeded"]]);
  assert.deepEqual(run.claims.map((c) => c.key), ["a.k"]);

  const refused = bh.batch();
  const nope = refused.add("task.finished", { run: "ts-batch", task: "nope", agent: "planner", outcome: "succeeded" });
  await assert.rejects(refused.flush(), (e: unknown) => {
    assert.ok(e instanceof BatchRefused, String(e));
    assert.deepEqual(e.results.map((r) => [r.id, r.status]), [[nope, 422]]);
    assert.ok(e.errors.some((item) => item.loc === `events.${nope}.data.task`), JSON.stringify(e.errors));
    return true;
  });
});
