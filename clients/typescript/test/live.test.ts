// End to end against a live Bulkhead (the suite's tests/clients/test_typescript_client.py starts
// it and passes the environment): a retry through a lost answer, Blocked, evidence the verifier
// re-checks to the same hash, an escalation the suite answers as a reviewer.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Blocked, Bulkhead, fileLines, queryResult } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: the suite's test_typescript_client.py runs this file`);
  return value;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const COLUMNS = "SELECT name AS column_name FROM pragma_table_info('customers') ORDER BY cid";

async function until<T>(what: string, check: () => Promise<T | undefined | false>): Promise<T> {
  for (let i = 0; i < 200; i++) {
    const value = await check();
    if (value) return value;
    await sleep(100);
  }
  throw new Error(`waited for ${what}`);
}

test("the TypeScript client drives a run through a live Bulkhead", async () => {
  const secret = env("BULKHEAD_SECRET");
  const token = env("BULKHEAD_TOKEN");
  const viaProxy = new Bulkhead({ endpoint: env("BULKHEAD_PROXY_ENDPOINT"), secret, token });
  const tasks = [
    { key: "plan", agent: "planner" },
    { key: "code", agent: "coder", prerequisites: ["plan"] },
    { key: "ask", agent: "planner" },
  ];
  const declared = await viaProxy.declareRun("ts-run", tasks, { title: "TypeScript end to end" });
  assert.equal(declared.type, "run.started");

  const bh = new Bulkhead({ endpoint: env("BULKHEAD_ENDPOINT"), secret, token });
  const frontier = await bh.frontier("ts-run");
  assert.deepEqual([...frontier.ready].sort(), ["ask", "plan"]);
  await assert.rejects(
    bh.start("ts-run", "code", { prompt_hash: "p", context_hash: "c" }, { agent: "coder" }),
    (e: unknown) => e instanceof Blocked && e.status === 409 && e.blockers.join() === "prerequisite:plan",
  );

  await bh.start("ts-run", "plan", { prompt_hash: "p1", context_hash: "c1" }, { agent: "planner" });
  const lines = fileLines("pricing-config.yaml", 2, 3, { root: env("WORKSPACE"), workspace: "shop" });
  await bh.send("claim.posted", {
    run: "ts-run", task: "plan", agent: "planner",
    claim: { key: "plan.threshold", statement: "Tiers come from `tier_source` and `gold_threshold`", evidence: lines },
  });
  const rows = queryResult(COLUMNS, ["column_name"], JSON.parse(env("ORDERS_COLUMNS")).map((c: string) => [c]), "orders");
  await bh.send("claim.posted", {
    run: "ts-run", task: "plan", agent: "planner",
    claim: { key: "plan.points", statement: "`customers.loyalty_points` holds the points", evidence: rows },
  });
  await bh.send("task.finished", { run: "ts-run", task: "plan", agent: "planner", outcome: "succeeded" });
  // The worker re-reads the file and re-runs the query: the same hashes, so both are verified.
  const claims = await until("both claims verified", async () => {
    const run = await bh.runDetail("ts-run");
    const statuses = Object.fromEntries(run.claims.map((c) => [c.key, c.status]));
    return statuses["plan.threshold"] === "verified" && statuses["plan.points"] === "verified" && statuses;
  });
  assert.ok(claims);
  await until("code ready", async () => (await bh.frontier("ts-run")).ready.includes("code"));

  await bh.start("ts-run", "ask", { prompt_hash: "p", context_hash: "c" }, { agent: "planner" });
  const accepted = await bh.send("packet.submitted", {
    run: "ts-run", task: "ask", agent: "planner",
    packet: {
      task: "ask", tried: ["looked for a tier column"],
      ruled_out: [{ hypothesis: "a tier column", how: "read the customers columns" }],
      evidence: [rows], smallest_unblocking_question: "Where does a customer's tier come from?",
    },
  });
  const escalation = Number(accepted.escalation);
  assert.deepEqual((await bh.escalations("ts-run")).map((e) => e.id), [escalation]);
  console.log(`ESCALATION ${escalation}`);
  const answer = await bh.waitForAnswer(escalation, { intervalMs: 200, timeoutMs: 60_000 });
  assert.equal(answer.text, env("ANSWER"));
  const context = await bh.context("ts-run", "ask");
  assert.equal(context.decision, "reframe");
});
