// Do the check and hand over what reality said, hashed the canonical way. The verifier re-runs
// the same check: a query on the registered data source, the file's lines in the workspace, the
// test command in the workspace (stdout and stderr as one stream), the GET.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { isAbsolute, join, relative } from "node:path";

import {
  fileReadPayload,
  httpExchangePayload,
  payloadHash,
  queryResultPayload,
  sha256Hex,
  splitLines,
  testRunPayload,
} from "./canonical.js";
import type { Evidence } from "./types.js";

/** `query_result` evidence from the rows your database driver returned for `sql`. Select real
 * columns as text (`CAST(x AS TEXT)`): a driver gives `0.0` as `0`, which hashes unlike the `0.0`
 * the verifier reads when it re-runs the query. */
export function queryResult(sql: string, columns: string[], rows: unknown[][], datasource?: string): Evidence {
  const payload = queryResultPayload(columns, rows);
  return { kind: "query_result", source: sql, payload_hash: payloadHash(payload), payload, ...(datasource ? { datasource } : {}) };
}

/** Lines `start`..`end` (1-based, inclusive) of a file under `root`, the workspace's directory. */
export function fileLines(path: string, start: number, end = start, options: { root?: string; workspace?: string } = {}): Evidence {
  const root = options.root;
  const named = root && isAbsolute(path) ? relative(root, path) : path;
  const full = root && !isAbsolute(path) ? join(root, path) : path;
  const lines = splitLines(new TextDecoder("utf-8", { fatal: true }).decode(readFileSync(full)));
  if (end > lines.length) throw new RangeError(`${named} has ${lines.length} lines, so lines ${start}-${end} do not exist`);
  const payload = fileReadPayload(named, start, end, lines.slice(start - 1, end));
  return {
    kind: "file_read",
    source: `${named}:${start}-${end}`,
    payload_hash: payloadHash(payload),
    payload,
    ...(options.workspace ? { workspace: options.workspace } : {}),
  };
}

/** A command line split into words as a POSIX shell would (quotes and backslashes; no expansion). */
export function shellWords(line: string): string[] {
  const words: string[] = [];
  let word = "";
  let started = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i] as string;
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new SyntaxError("no closing quotation");
      word += line.slice(i + 1, end);
      i = end;
      started = true;
    } else if (c === '"') {
      i++;
      while (i < line.length && line[i] !== '"') {
        if (line[i] === "\\" && i + 1 < line.length && '"\\$`'.includes(line[i + 1] as string)) i++;
        word += line[i];
        i++;
      }
      if (i >= line.length) throw new SyntaxError("no closing quotation");
      started = true;
    } else if (c === "\\" && i + 1 < line.length) {
      word += line[++i];
      started = true;
    } else if (/\s/.test(c)) {
      if (started) words.push(word);
      word = "";
      started = false;
    } else {
      word += c;
      started = true;
    }
  }
  if (started) words.push(word);
  return words;
}

export interface TestRun {
  exitCode: number;
  output: Buffer;
  evidence: Evidence;
}

/** Run a test command line (no shell) with stdout and stderr as one stream; `test_run` evidence. */
export function testCommand(command: string, options: { cwd?: string; workspace?: string; timeoutMs?: number } = {}): TestRun {
  const [program, ...args] = shellWords(command);
  if (!program) throw new RangeError("the command line is empty");
  const env: Record<string, string> = { LANG: "C.UTF-8", LC_ALL: "C.UTF-8", TZ: "UTC" };
  for (const key of ["PATH", "HOME"]) if (process.env[key]) env[key] = process.env[key] as string;
  // One stream, in the order written: both descriptors are the same pipe.
  const done = spawnSync("/bin/sh", ["-c", 'exec "$@" 2>&1', "sh", program, ...args], {
    cwd: options.cwd,
    env,
    stdio: ["ignore", "pipe", "pipe"],
    timeout: options.timeoutMs ?? 600_000,
    maxBuffer: 1 << 30,
  });
  if (done.error) throw done.error;
  const exitCode = done.status ?? 128 + (done.signal ? 9 : 0);
  const output = done.stdout;
  const payload = testRunPayload(command, exitCode, sha256Hex(output));
  return {
    exitCode,
    output,
    evidence: {
      kind: "test_run",
      source: command,
      payload_hash: payloadHash(payload),
      payload,
      ...(options.workspace ? { workspace: options.workspace } : {}),
    },
  };
}

const MAX_REDIRECTS = 5; // as the verifier

/** Make the request as Bulkhead's verifier re-makes it: its final response and `http_exchange`
 * evidence. Redirects are followed to the same host only (at most 5, the method kept); one to
 * another host, or more than 5, throws a RangeError: the verifier would not follow it, so the
 * exchange could never be checked. */
export async function httpExchange(url: string, method = "GET"): Promise<{ response: Response; body: Uint8Array; evidence: Evidence }> {
  const host = new URL(url).hostname;
  let target = new URL(url);
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const response = await fetch(target, { method, redirect: "manual" });
    const location = response.headers.get("location");
    if (response.status >= 300 && response.status < 400 && location !== null) {
      await response.arrayBuffer(); // the connection is free again
      target = new URL(location, target);
      if (target.hostname !== host) {
        throw new RangeError(
          `${url} redirects to ${target.href}, another host: Bulkhead's verifier does not follow redirects off the host, so this exchange cannot be evidence; request the final URL instead`,
        );
      }
      continue;
    }
    const body = new Uint8Array(await response.arrayBuffer()); // Content-Encoding undone by fetch
    const payload = httpExchangePayload(method, url, response.status, sha256Hex(body));
    return { response, body, evidence: { kind: "http_exchange", source: url, payload_hash: payloadHash(payload), payload } };
  }
  throw new RangeError(`${url} redirects more than ${MAX_REDIRECTS} times`);
}
