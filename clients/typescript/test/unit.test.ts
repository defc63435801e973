// Unit tests against a loopback stand-in: signing, retries under one webhook-id, refusals, hashes.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { BatchRefused, Blocked, Bulkhead, Refused, RetriesExhausted, Unauthorized, canonicalJson, fileLines, httpExchange, payloadHash, pythonNumber, queryResult, shellWords, sign, testCommand } from "../src/index.js";

const SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

interface Seen { path: string; headers: IncomingMessage["headers"]; body: string }
type Answer = [number, Record<string, string>, unknown];
type Reply = Answer | ((seen: Seen) => Answer);

async function fake(script: Reply[]): Promise<{ seen: Seen[]; base: string; close: () => void }> {
  const seen: Seen[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const now: Seen = { path: req.url ?? "", headers: req.headers, body };
      seen.push(now);
      const reply = script.shift() ?? [202, {}, { event: "e", type: "t" }];
      const [status, headers, json] = typeof reply === "function" ? reply(now) : reply;
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(JSON.stringify(json));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { seen, base: `http://127.0.0.1:${port}`, close: () => server.close() };
}

const noSleep: number[] = [];
const client = (base: string) =>
  new Bulkhead({ endpoint: `${base}/hooks/v1/agents/a1/events`, secret: SECRET, token: "bhk_t", sleep: async (ms) => void noSleep.push(ms) });

test("the README's worked examples hash as documented", () => {
  const payload = { columns: ["column_name"], rows: [["id"], ["name"], ["email"], ["loyalty_points"]] };
  assert.equal(payloadHash(payload), "sha256:a78a387c228fd00996f3c56b3bc237b91eafd6c8720ff34bac9b49fe1c4afaf8");
  const http = { request: { method: "GET", url: "https://api.example.com/v1/customers/42" }, response: { body_sha256: "102ba5f0edc776bef81a96a27f98f1e8f047a577fdcfbd850e34cdd39b4ed444", status: 200 } };
  assert.equal(payloadHash(http), "sha256:5f7de57fa75d327e1924222d843886d1911924a0bf53d53c7f963acab6641c67");
  assert.equal(canonicalJson({ b: "é", a: [1, 2.5, null, true] }), '{"a":[1,2.5,null,true],"b":"é"}');
});

test("non-integer numbers are written as Python's repr(float)", () => {
  const cases: [number, string][] = [[0.1, "0.1"], [1e-5, "1e-05"], [0.0001, "0.0001"], [1e16, "10000000000000000"], [1e15 + 0.5, "1000000000000000.5"], [1e21, "1e+21"], [1.5e300, "1.5e+300"], [-2.5e-7, "-2.5e-07"], [12345678.9, "12345678.9"], [-0, "0"]];
  for (const [value, text] of cases) assert.equal(pythonNumber(value), text, String(value));
  assert.throws(() => payloadHash({ x: NaN }), /NaN/);
  assert.throws(() => payloadHash({ x: "\ud800" }), /surrogate/);
});

test("file lines and a test command are hashed as the verifier re-reads and re-runs them", () => {
  const dir = mkdtempSync(join(tmpdir(), "bh-"));
  writeFileSync(join(dir, "pricing.yaml"), '# tiers\ndiscounts:\n  loyalty_points_threshold: 500\n  discount: "10%"\n');
  const lines = fileLines("pricing.yaml", 3, 4, { root: dir, workspace: "shop" });
  assert.equal(lines.source, "pricing.yaml:3-4");
  assert.deepEqual(lines.payload, { path: "pricing.yaml", lines: [3, 4], text: '  loyalty_points_threshold: 500\n  discount: "10%"' });
  const run = testCommand(`node -e "console.log('..'); console.error('2 passed')"`, { cwd: dir });
  assert.equal(run.exitCode, 0);
  assert.match(run.output.toString(), /2 passed/);
  assert.equal(testCommand("node -e 'process.exit(3)'", { cwd: dir }).exitCode, 3);
  assert.deepEqual(shellWords(`pytest -q "tests/a b.py" 'x y' c\\ d`), ["pytest", "-q", "tests/a b.py", "x y", "c d"]);
  const rows = queryResult("SELECT 1", ["x"], [[1, null, new Uint8Array([255, 0])]], "orders");
  assert.deepEqual(rows.payload, { columns: ["x"], rows: [[1, null, "\\xff00"]] });
});

test("an event is signed over its body bytes", async () => {
  const server = await fake([]);
  try {
    await client(server.base).send("capability.changed", { capability: "forge", status: "up" });
    const [seen] = server.seen;
    assert.ok(seen);
    assert.equal(seen.path, "/hooks/v1/agents/a1/events");
    const id = String(seen.headers["webhook-id"]);
    const stamp = Number(seen.headers["webhook-timestamp"]);
    assert.equal(seen.headers["webhook-signature"], sign(SECRET, id, stamp, seen.body));
    assert.equal(JSON.parse(seen.body).type, "capability.changed");
  } finally {
    server.close();
  }
});

test("429 and 503 are retried with the same webhook-id, body and timestamp, honouring Retry-After", async () => {
  const server = await fake([
    [429, { "retry-after": "7" }, { errors: [] }],
    [503, { "retry-after": "2" }, { errors: [] }],
    [202, {}, { event: "e1", type: "task.finished" }],
  ]);
  noSleep.length = 0;
  try {
    const accepted = await client(server.base).send("task.finished", { run: "r", task: "a", outcome: "succeeded" });
    assert.equal(accepted.event, "e1");
    assert.deepEqual(noSleep, [7000, 2000]);
    const keys = new Set(server.seen.map((s) => `${s.headers["webhook-id"]}|${s.headers["webhook-timestamp"]}|${s.body}`));
    assert.equal(server.seen.length, 3);
    assert.equal(keys.size, 1);
  } finally {
    server.close();
  }
});

test("retries are bounded", async () => {
  const server = await fake(Array.from({ length: 10 }, (): Answer => [503, {}, { errors: [] }]));
  try {
    const bh = new Bulkhead({ endpoint: `${server.base}/hooks/v1/agents/a1/events`, secret: SECRET, retry: { attempts: 3 }, sleep: async () => {} });
    await assert.rejects(bh.send("capability.changed", { capability: "f", status: "up" }), (e: unknown) => e instanceof RetriesExhausted && e.attempts === 3);
    assert.equal(server.seen.length, 3);
  } finally {
    server.close();
  }
});

test("a 4xx throws with the server's errors; a 409 with blockers is Blocked", async () => {
  const blockers = [{ loc: "blockers", msg: "prerequisite:plan" }, { loc: "claims.k", msg: "k is refuted: ..." }];
  const server = await fake([
    [422, {}, { errors: [{ loc: "data.task", msg: "no task 'zz'" }] }],
    [409, {}, { errors: blockers }],
  ]);
  try {
    const bh = client(server.base);
    await assert.rejects(bh.send("task.finished", { run: "r", task: "zz", outcome: "succeeded" }), (e: unknown) => e instanceof Refused && e.status === 422 && e.messages("data.task")[0] === "no task 'zz'");
    await assert.rejects(bh.start("r", "code", { prompt_hash: "p", context_hash: "c" }), (e: unknown) => e instanceof Blocked && e.blockers.join() === "prerequisite:plan" && e.reasons.length === 1);
  } finally {
    server.close();
  }
});

test("reads send the bearer token and retry a 503", async () => {
  const server = await fake([
    [503, { "retry-after": "0" }, { errors: [] }],
    [200, {}, { policy: "scoped", ready: ["a"], deferred: [] }],
  ]);
  try {
    const frontier = await client(server.base).frontier("r 1");
    assert.deepEqual(frontier.ready, ["a"]);
    assert.equal(server.seen[1]?.path, "/api/v1/runs/r%201/frontier");
    assert.equal(server.seen[1]?.headers.authorization, "Bearer bhk_t");
  } finally {
    server.close();
  }
});

// Batches: non-gating events buffered and sent in one signed request ----------------------------

interface SentEvent { id: string; type: string; timestamp: string; data: unknown }
const eventsOf = (seen: Seen): SentEvent[] => JSON.parse(seen.body).events;
const resultsFor = (seen: Seen): Answer => [200, {}, { results: eventsOf(seen).map((e) => ({ id: e.id, status: 202, body: { event: e.id, type: e.type } })) }];

test("a batch sends its events in one request signed over its body, each event with its own id", async () => {
  const server = await fake([resultsFor]);
  try {
    const batch = client(server.base).batch();
    const first = batch.add("claim.posted", { run: "r", task: "a", claim: { key: "k", statement: "s" } });
    const second = batch.add("task.finished", { run: "r", task: "a", outcome: "succeeded" }, { id: "evt_given" });
    assert.equal(second, "evt_given");
    assert.equal(server.seen.length, 0); // buffered until flushed
    const results = await batch.flush();
    const [seen] = server.seen;
    assert.ok(seen);
    assert.equal(server.seen.length, 1);
    assert.equal(seen.path, "/hooks/v1/agents/a1/batches");
    const id = String(seen.headers["webhook-id"]);
    assert.match(id, /^batch_[0-9a-f]{32}$/);
    assert.equal(seen.headers["webhook-signature"], sign(SECRET, id, Number(seen.headers["webhook-timestamp"]), seen.body));
    const events = eventsOf(seen);
    assert.deepEqual(events.map((e) => [e.id, e.type]), [[first, "claim.posted"], ["evt_given", "task.finished"]]);
    assert.match(first, /^msg_[0-9a-f]{32}$/);
    assert.deepEqual(Object.keys(events[0] ?? {}).sort(), ["data", "id", "timestamp", "type"]);
    assert.deepEqual(events[1]?.data, { run: "r", task: "a", outcome: "succeeded" });
    assert.deepEqual(results.map((r) => [r.id, r.status]), [[first, 202], ["evt_given", 202]]);
    assert.deepEqual(await batch.flush(), []); // nothing waits: nothing sent
    assert.equal(server.seen.length, 1);
  } finally {
    server.close();
  }
});

test("a batch is retried whole under its webhook-id, timestamp and body after a 503", async () => {
  const server = await fake([[503, { "retry-after": "1" }, { errors: [] }], resultsFor]);
  try {
    const batch = client(server.base).batch();
    batch.add("capability.changed", { capability: "forge", status: "up" });
    assert.deepEqual((await batch.flush()).map((r) => r.status), [202]);
    const keys = new Set(server.seen.map((s) => `${s.headers["webhook-id"]}|${s.headers["webhook-timestamp"]}|${s.body}`));
    assert.equal(server.seen.length, 2);
    assert.equal(keys.size, 1);
  } finally {
    server.close();
  }
});

test("a gating event is not buffered, and a batch holds 1 to 500 events", () => {
  const bh = new Bulkhead({ endpoint: "http://127.0.0.1:9/hooks/v1/agents/a1/events", secret: SECRET });
  const batch = bh.batch();
  const start = { run: "r", task: "a", attempt: { prompt_hash: "p", context_hash: "c" } };
  // @ts-expect-error: the type allows only the non-gating events; plain JavaScript is refused when it runs.
  assert.throws(() => batch.add("task.started", start), (e: unknown) => e instanceof RangeError && /^task\.started is not buffered: send it on its own .*a batch takes capability\.changed, claim\.checked, claim\.posted, task\.finished$/.test(e.message));
  // @ts-expect-error: likewise packet.submitted
  assert.throws(() => batch.add("packet.submitted", {}), /packet\.submitted is not buffered/);
  assert.equal(batch.size, 0);
  assert.equal(batch.maxEvents, 500);
  for (const maxEvents of [0, 501, 2.5]) assert.throws(() => bh.batch({ maxEvents }), new RegExp(`1 to 500 events, not ${maxEvents}`));
});

test("a batch is sent as soon as maxEvents wait, in order, and flush returns every result since", async () => {
  const server = await fake([resultsFor, resultsFor, resultsFor]);
  try {
    const batch = client(server.base).batch({ maxEvents: 2 });
    const ids = [0, 1, 2, 3, 4].map((i) => batch.add("capability.changed", { capability: `c${i}`, status: "up" }));
    assert.equal(batch.size, 1); // four went to two requests of two
    const results = await batch.flush();
    assert.deepEqual(server.seen.map((s) => eventsOf(s).map((e) => e.id)), [ids.slice(0, 2), ids.slice(2, 4), ids.slice(4)]);
    assert.deepEqual(results.map((r) => r.id), ids);
    assert.deepEqual(batch.results.map((r) => r.id), ids);
  } finally {
    server.close();
  }
});

test("a refused event of a batch throws BatchRefused with every event's result", async () => {
  const oneRefused = (seen: Seen): Answer => {
    const [a, b] = eventsOf(seen);
    return [200, {}, { results: [
      { id: a?.id, status: 202, body: { event: "e", type: "task.finished" } },
      { id: b?.id, status: 422, body: { errors: [{ loc: "data.task", msg: "no task 'zz'" }] } },
    ] }];
  };
  const server = await fake([oneRefused]);
  try {
    const batch = client(server.base).batch();
    batch.add("task.finished", { run: "r", task: "a", outcome: "succeeded" });
    const second = batch.add("task.finished", { run: "r", task: "zz", outcome: "succeeded" });
    await assert.rejects(batch.flush(), (e: unknown) => {
      assert.ok(e instanceof BatchRefused && e instanceof Refused);
      assert.equal(e.status, 422);
      assert.deepEqual(e.errors, [{ loc: `events.${second}.data.task`, msg: "no task 'zz'" }]);
      assert.deepEqual(e.messages(`events.${second}.data.task`), ["no task 'zz'"]);
      assert.deepEqual(e.results.map((r) => r.status), [202, 422]);
      return true;
    });
  } finally {
    server.close();
  }
});

test("a batch that gets no answer waits again, and is sent again under the same event ids", async () => {
  const server = await fake([[503, {}, { errors: [] }], [503, {}, { errors: [] }], resultsFor, resultsFor]);
  try {
    const bh = new Bulkhead({ endpoint: `${server.base}/hooks/v1/agents/a1/events`, secret: SECRET, retry: { attempts: 2 }, sleep: async () => {} });
    const batch = bh.batch({ maxEvents: 2 });
    const ids = [0, 1, 2].map((i) => batch.add("capability.changed", { capability: `c${i}`, status: "up" }));
    await assert.rejects(batch.flush(), (e: unknown) => e instanceof RetriesExhausted && e.attempts === 2);
    assert.equal(server.seen.length, 2); // the first request, tried twice; the second not sent after it failed
    assert.equal(batch.size, 3);
    assert.deepEqual((await batch.flush()).map((r) => r.id), ids);
    const sent = server.seen.map((s) => eventsOf(s).map((e) => e.id));
    assert.deepEqual(sent, [ids.slice(0, 2), ids.slice(0, 2), ids.slice(0, 2), ids.slice(2)]);
    assert.notEqual(server.seen[0]?.headers["webhook-id"], server.seen[2]?.headers["webhook-id"]); // a new request
  } finally {
    server.close();
  }
});

test("an HTTP exchange follows a redirect on its host as the verifier, and refuses one off it", async () => {
  const { seen, base, close } = await fake([
    [301, { location: "/v1/customers/42/" }, {}],
    [200, {}, { id: 42, tier: null }],
    [302, { location: "http://localhost:1/elsewhere" }, {}],
    ...Array.from({ length: 6 }, (_, n): Answer => [302, { location: `/hop-${n}` }, {}]),
  ]);
  try {
    const { body, evidence } = await httpExchange(`${base}/v1/customers/42`);
    assert.deepEqual(seen.map((s) => s.path), ["/v1/customers/42", "/v1/customers/42/"]);
    assert.deepEqual(evidence.payload, {
      request: { method: "GET", url: `${base}/v1/customers/42` },
      response: { status: 200, body_sha256: createHash("sha256").update(body).digest("hex") },
    });
    await assert.rejects(httpExchange(`${base}/away`), /another host: Bulkhead's verifier does not follow/);
    await assert.rejects(httpExchange(`${base}/start`), /redirects more than 5 times/);
    assert.equal(seen.length, 9);
  } finally {
    close();
  }
});

test("after RetriesExhausted the event is sent again as it was first, and applied once", async () => {
  const server = await fake([[503, {}, { errors: [] }], [503, {}, { errors: [] }]]);
  try {
    const bh = new Bulkhead({ endpoint: `${server.base}/hooks/v1/agents/a1/events`, secret: SECRET, retry: { attempts: 2 }, sleep: async () => {} });
    let exhausted: RetriesExhausted | undefined;
    await assert.rejects(bh.send("task.finished", { run: "r1", task: "a", outcome: "succeeded" }), (e: unknown) => {
      exhausted = e as RetriesExhausted;
      return e instanceof RetriesExhausted && /deliver\(error\.event\)/.test(e.message);
    });
    const event = exhausted?.event;
    assert.ok(event);
    assert.equal((await bh.deliver(event)).event, "e");
    assert.equal(server.seen.length, 3);
    assert.deepEqual(new Set(server.seen.map((s) => `${s.headers["webhook-id"]} ${s.body}`)), new Set([`${event.webhookId} ${event.body}`]));
  } finally {
    server.close();
  }
});

test("a request unanswered within timeoutMs is retried under the same webhook-id", async () => {
  const seen: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    seen.push(String(req.headers["webhook-id"]));
    if (seen.length === 1) return; // never answered
    req.resume();
    req.on("end", () => {
      res.writeHead(202, { "content-type": "application/json" });
      res.end(JSON.stringify({ event: "e2", type: "task.finished" }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  try {
    const bh = new Bulkhead({ endpoint: `http://127.0.0.1:${port}/hooks/v1/agents/a1/events`, secret: SECRET, timeoutMs: 200, sleep: async () => {} });
    assert.equal((await bh.send("task.finished", { run: "r1", task: "a", outcome: "succeeded" })).event, "e2");
    assert.equal(seen.length, 2);
    assert.equal(seen[0], seen[1]);
    const once = new Bulkhead({ endpoint: `http://127.0.0.1:${port}/hooks/v1/agents/a1/events`, secret: SECRET, timeoutMs: 200, retry: { attempts: 1 } });
    seen.length = 0;
    await assert.rejects(once.send("task.finished", { run: "r1", task: "a", outcome: "succeeded" }), /no answer within 200 ms/);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test("a batch larger than the server's limit goes in requests within it; an event too large for one is refused", async () => {
  const server = await fake(Array.from({ length: 10 }, () => resultsFor));
  try {
    const bh = new Bulkhead({ endpoint: `${server.base}/hooks/v1/agents/a1/events`, secret: SECRET, sleep: async () => {} });
    const batch = bh.batch({ maxBytes: 200_000 });
    const claim = (n: number, size: number) => ({ run: "r", task: "a", claim: { key: `k${n}`, statement: "s".repeat(size) } });
    const ids = [0, 1, 2, 3, 4, 5, 6].map((n) => batch.add("claim.posted", claim(n, 60_000)));
    await batch.flush();
    assert.deepEqual(server.seen.map((s) => Buffer.byteLength(s.body) <= 200_000), [true, true, true]);
    assert.deepEqual(server.seen.flatMap((s) => eventsOf(s).map((e) => e.id)), ids);
    assert.deepEqual(batch.results.map((r) => r.id), ids);
    assert.throws(() => batch.add("claim.posted", claim(9, 300_000)), /more than a batch of 200000 bytes holds: send it on its own/);
    assert.equal(batch.size, 0);
  } finally {
    server.close();
  }
});

test("a 401 says when this machine's clock is minutes off the server's", async () => {
  const refusal = { errors: [{ loc: "webhook-signature", msg: "authentication failed" }] };
  const ahead = Date.now() - 600_000; // the server's clock: this machine is 10 minutes ahead
  const server = await fake([[401, { date: new Date(ahead).toUTCString() }, refusal], [401, { date: new Date().toUTCString() }, refusal]]);
  try {
    const bh = new Bulkhead({ endpoint: `${server.base}/hooks/v1/agents/a1/events`, secret: SECRET, sleep: async () => {} });
    await assert.rejects(bh.send("capability.changed", { capability: "f", status: "up" }), (e: unknown) =>
      e instanceof Unauthorized && e.clockSkewMs !== null && Math.abs(e.clockSkewMs - 600_000) < 5_000 && /clock is \+60\d s from the server's/.test(e.message));
    await assert.rejects(bh.send("capability.changed", { capability: "f", status: "up" }), (e: unknown) =>
      e instanceof Unauthorized && !/clock is/.test(e.message));
  } finally {
    server.close();
  }
});
