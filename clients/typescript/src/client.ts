// One agent's connection to Bulkhead: signed events (Standard Webhooks v1) with idempotent
// retries, and the read API (runs, frontiers, next-attempt context, escalations).
import { createHmac, randomUUID } from "node:crypto";

import { Batch, type BatchOptions } from "./batches.js";
import { Blocked, Refused, RetriesExhausted, Unauthorized, type ErrorItem } from "./errors.js";
import type { Accepted, BatchEvent, BatchResult, ContextOut, EscalationOut, EscalationRow, EventData, EventType, FrontierOut, RunOut, TaskSpec } from "./types.js";

const RETRYABLE = new Set([429, 502, 503, 504]);
// A webhook-timestamp more than 5 minutes off is refused: a later retry is signed again.
const RESIGN_AFTER_S = 240;
const RESEND = "send it again later with deliver(error.event): the same webhook-id and body";
const ENDPOINT = /^(?<prefix>.*)\/hooks\/v1\/agents\/(?<agent>[^/]+)\/(?:events|batches)\/?$/;

export interface RetryPolicy {
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  deadlineMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 6, baseDelayMs: 500, maxDelayMs: 30_000, deadlineMs: 120_000 };

/** One event, ready to send: its webhook-id, body and signing time are fixed for every retry. */
export interface PreparedEvent {
  webhookId: string;
  type: string;
  body: string;
  signedAt: number;
}

export interface ClientOptions {
  endpoint: string;
  secret: string;
  token?: string;
  retry?: Partial<RetryPolicy>;
  /** How long one request may take before it counts as unanswered and is retried (30 s). */
  timeoutMs?: number;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  now?: () => number; // milliseconds
}

/** A request that got no answer within its time (AbortSignal.timeout's error). */
function isTimeout(error: unknown): boolean {
  return error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
}

/** `sign(secret, id, timestamp, body)`: the webhook-signature header's `v1,<base64>`. */
export function sign(secret: string, webhookId: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  if (key.length === 0) throw new RangeError("an empty signing secret");
  const digest = createHmac("sha256", key).update(`${webhookId}.${timestamp}.${body}`, "utf8").digest("base64");
  return `v1,${digest}`;
}

/** Seconds the server asked to wait (delta-seconds or an HTTP date), if it said. */
export function retryAfterMs(value: string | null, nowMs: number): number | null {
  if (!value) return null;
  const seconds = Number(value.trim());
  if (value.trim() !== "" && Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, when - nowMs);
}

export class Bulkhead {
  readonly agentId: string;
  readonly baseUrl: string;
  readonly endpoint: string;
  readonly batchEndpoint: string;
  readonly retry: RetryPolicy;
  readonly timeoutMs: number;
  private readonly secret: string;
  private readonly token?: string;
  private readonly fetch: typeof fetch;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly now: () => number;

  constructor(options: ClientOptions) {
    const url = new URL(options.endpoint);
    const found = ENDPOINT.exec(url.pathname);
    if (!found?.groups) throw new RangeError(`${options.endpoint} is not an agent's endpoint: it ends /hooks/v1/agents/<id>/events`);
    this.agentId = found.groups.agent as string;
    this.baseUrl = `${url.origin}${found.groups.prefix}`;
    this.endpoint = `${this.baseUrl}/hooks/v1/agents/${this.agentId}/events`;
    this.batchEndpoint = `${this.baseUrl}/hooks/v1/agents/${this.agentId}/batches`;
    this.secret = options.secret;
    this.token = options.token;
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.fetch = options.fetch ?? fetch;
    this.sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.now = options.now ?? Date.now;
  }

  /** The event's envelope: its type, the time now and its data. */
  envelope<T extends EventType>(type: T, data: EventData[T]): { type: T; timestamp: string; data: EventData[T] } {
    return { type, timestamp: new Date(this.now()).toISOString(), data };
  }

  /** The event's envelope as body text, with a webhook-id (new unless given). */
  prepare<T extends EventType>(type: T, data: EventData[T], webhookId?: string): PreparedEvent {
    return {
      webhookId: webhookId ?? newId("msg"),
      type,
      body: JSON.stringify(this.envelope(type, data)),
      signedAt: Math.floor(this.now() / 1000),
    };
  }

  /** Events of a batch as one body text, signed as one request under its own webhook-id (new
   * unless given), which every retry of it keeps; each event keeps its own id. */
  prepareBatch(events: BatchEvent[], webhookId?: string): PreparedEvent {
    return {
      webhookId: webhookId ?? newId("batch"),
      type: "batch",
      body: JSON.stringify({ events }),
      signedAt: Math.floor(this.now() / 1000),
    };
  }

  /** Post a prepared batch, retrying under the same webhook-id and body: each event's result,
   * in order (a refused event is a result, not a throw: `Batch.flush` throws `BatchRefused`). */
  async deliverBatch(batch: PreparedEvent): Promise<BatchResult[]> {
    const response = await this.postSigned(this.batchEndpoint, batch);
    return ((await response.json()) as { results: BatchResult[] }).results;
  }

  /** A buffer for events that gate nothing (claim.posted, claim.checked, task.finished,
   * capability.changed), sent together in signed batches of at most `maxEvents` (500). */
  batch(options: BatchOptions = {}): Batch {
    return new Batch(this, options);
  }

  /** Sign and post one event; throws `Refused` (or `Blocked`, `Unauthorized`) with the server's errors. */
  async send<T extends EventType>(type: T, data: EventData[T], webhookId?: string): Promise<Accepted> {
    return this.deliver(this.prepare(type, data, webhookId));
  }

  /** Post a prepared event, retrying under the same webhook-id and body. */
  async deliver(event: PreparedEvent): Promise<Accepted> {
    const response = await this.postSigned(this.endpoint, event);
    return (await response.json()) as Accepted;
  }

  async postSigned(url: string, event: PreparedEvent): Promise<Response> {
    let current = event;
    const response = await this.withRetries(`${event.type} ${event.webhookId}`, () => {
      if (this.now() / 1000 - current.signedAt > RESIGN_AFTER_S) current = { ...current, signedAt: Math.floor(this.now() / 1000) };
      return this.fetch(url, {
        method: "POST",
        body: current.body,
        headers: {
          "content-type": "application/json",
          "webhook-id": current.webhookId,
          "webhook-timestamp": String(current.signedAt),
          "webhook-signature": sign(this.secret, current.webhookId, current.signedAt, current.body),
        },
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    }, event);
    if (response.ok) return response;
    throw await refusal(response, this.now());
  }

  private async withRetries(what: string, call: () => Promise<Response>, event?: PreparedEvent): Promise<Response> {
    const then = event ? RESEND : "try again later";
    const started = this.now();
    const policy = this.retry;
    for (let tries = 1; ; tries++) {
      let status: number | null = null;
      let asked: number | null = null;
      let problem: string;
      try {
        const response = await call();
        if (!RETRYABLE.has(response.status)) return response;
        status = response.status;
        asked = retryAfterMs(response.headers.get("retry-after"), this.now());
        problem = `${status} ${(await response.text()).slice(0, 200)}`;
      } catch (error) {
        if (isTimeout(error)) {
          problem = `no answer within ${this.timeoutMs} ms`;
        } else if (error instanceof TypeError) {
          problem = `${error.message}: ${String((error as { cause?: unknown }).cause ?? "")}`; // fetch's network errors
        } else {
          throw error;
        }
      }
      if (tries >= policy.attempts) {
        throw new RetriesExhausted(`${what}: no answer after ${tries} tries (${problem}); ${then}`, tries, status, event);
      }
      let wait = asked;
      if (wait === null) {
        const backoff = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (tries - 1));
        wait = backoff * (0.5 + Math.random() / 2);
      }
      if (this.now() - started + wait > policy.deadlineMs) {
        throw new RetriesExhausted(`${what}: ${problem}; waiting ${wait} ms more would pass the retry deadline; ${then}`, tries, status, event);
      }
      await this.sleep(wait);
    }
  }

  // The read API -------------------------------------------------------------------------------

  async get<T>(path: string): Promise<T> {
    if (!this.token) throw new RangeError("the read API needs the agent's api_token (token: ...)");
    const url = `${this.baseUrl}/api/v1${path}`;
    const response = await this.withRetries(`GET ${path}`, () =>
      this.fetch(url, { headers: { authorization: `Bearer ${this.token}` }, signal: AbortSignal.timeout(this.timeoutMs) }),
    );
    if (!response.ok) throw await refusal(response, this.now());
    return (await response.json()) as T;
  }

  runDetail(run: string): Promise<RunOut> {
    return this.get(`/runs/${encodeURIComponent(run)}`);
  }

  frontier(run: string): Promise<FrontierOut> {
    return this.get(`/runs/${encodeURIComponent(run)}/frontier`);
  }

  context(run: string, task: string): Promise<ContextOut> {
    return this.get(`/runs/${encodeURIComponent(run)}/tasks/${encodeURIComponent(task)}/context`);
  }

  escalation(id: number): Promise<EscalationOut> {
    return this.get(`/escalations/${id}`);
  }

  escalations(run: string): Promise<EscalationRow[]> {
    return this.get(`/runs/${encodeURIComponent(run)}/escalations`);
  }

  // Orchestration --------------------------------------------------------------------------------

  /** `run.started` (the same run with the same tasks again is a no-op). */
  async declareRun(run: string, tasks: TaskSpec[], options: { title?: string; policy?: "scoped" | "global_halt"; agent?: string } = {}): Promise<Accepted> {
    return this.send("run.started", { run, tasks, ...options });
  }

  /** `task.started`; throws `Blocked` with the typed blockers when the task may not start. */
  async start(run: string, task: string, attempt: { prompt_hash: string; context_hash: string }, options: { agent?: string; consumes?: string[]; refreshed?: string[] } = {}): Promise<Accepted> {
    return this.send("task.started", { run, task, attempt, ...options });
  }

  /** Poll the escalation until a reviewer answers it (a returned packet throws with its note). */
  async waitForAnswer(id: number, options: { timeoutMs?: number; intervalMs?: number } = {}) {
    const deadline = this.now() + (options.timeoutMs ?? 3_600_000);
    for (;;) {
      const found = await this.escalation(id);
      if (found.answer) return found.answer;
      if (found.status === "returned") throw new Refused(409, [{ loc: "escalation", msg: `returned: ${found.note ?? ""}` }], found);
      if (found.status === "closed") throw new Refused(409, [{ loc: "escalation", msg: `closed without an answer: ${found.reason}` }], found);
      if (this.now() > deadline) throw new RetriesExhausted(`no answer to escalation ${id}`, 0, null);
      await this.sleep(options.intervalMs ?? 1000);
    }
  }
}

function newId(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll("-", "")}`;
}

async function refusal(response: Response, nowMs: number): Promise<Refused> {
  const text = await response.text();
  let body: unknown = text;
  let errors: ErrorItem[] = [{ loc: "body", msg: text.slice(0, 500) }];
  try {
    body = JSON.parse(text);
    const listed = (body as { errors?: unknown }).errors;
    errors = Array.isArray(listed) ? (listed as ErrorItem[]) : [];
  } catch {
    // not JSON: the text is the error
  }
  if (response.status === 401) {
    const date = Date.parse(response.headers.get("date") ?? "");
    const skewMs = Number.isNaN(date) ? null : nowMs - date;
    return new Unauthorized(401, errors, body, skewMs);
  }
  if (response.status === 409 && errors.some((e) => e.loc === "blockers")) return new Blocked(409, errors, body);
  return new Refused(response.status, errors, body);
}
