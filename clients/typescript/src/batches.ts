// A buffer of events that gate nothing, sent together: `POST /hooks/v1/agents/<id>/batches`.
// The batch is signed like one event (its own webhook-id, fixed across retries); each event in it
// is idempotent on its own `id`, so a batch sent again applies nothing twice.
import { randomUUID } from "node:crypto";

import type { Bulkhead } from "./client.js";
import { Refused, type ErrorItem } from "./errors.js";
import { NON_GATING, type BatchEvent, type BatchResult, type EventData, type NonGatingType } from "./types.js";

export const MAX_EVENTS = 500;
/** The server's WEBHOOK_MAX_BATCH_BYTES unless it was changed. */
export const MAX_BYTES = 16 * 1024 * 1024;
const FRAME = '{"events":[]}'.length;

export interface BatchOptions {
  /** Sent as soon as this many events wait (1 to 500; 500 unless given). */
  maxEvents?: number;
  /** A request's body holds at most this many bytes of JSON (16 MiB unless given). */
  maxBytes?: number;
}

/** Events of a batch that were refused: `results` are every event's result, in order; `errors`
 * name each refused event's problems at `events.<id>.<loc>`. The other events were applied. */
export class BatchRefused extends Refused {
  readonly results: BatchResult[];

  constructor(results: BatchResult[]) {
    super(Math.max(...results.map((r) => r.status)), refusedErrors(results), results);
    this.results = results;
  }
}

function refusedErrors(results: BatchResult[]): ErrorItem[] {
  return results
    .filter((r) => r.status >= 400)
    .flatMap((r) => {
      const listed = r.body.errors;
      const errors = Array.isArray(listed) ? (listed as Partial<ErrorItem>[]) : [{ loc: "", msg: JSON.stringify(r.body) }];
      return errors.map((e) => ({ loc: `events.${r.id}.${e.loc ?? ""}`, msg: String(e.msg ?? "") }));
    });
}

/**
 * `const batch = bh.batch(); batch.add("claim.posted", {...}); await batch.flush();`
 *
 * `add` buffers an event and returns its id; when `maxEvents` (or `maxBytes` of JSON) wait they are sent at once, in the
 * background, one request after another in the order they were added. `flush` sends what waits,
 * waits for every request, and returns the result of each event sent since the last `flush`
 * (throwing `BatchRefused` if any was refused, or what stopped a request: `RetriesExhausted`,
 * `Refused` of the batch as a whole, in which case its events and those after them wait again,
 * and the next `flush` sends them again under their same ids). `results` keeps every result.
 */
export class Batch {
  readonly maxEvents: number;
  readonly maxBytes: number;
  /** Every event's result, in order, across every request of this batch. */
  readonly results: BatchResult[] = [];
  private waiting: BatchEvent[] = [];
  private sizes = new Map<BatchEvent, number>(); // each event's JSON in the body, with its comma
  private unsent: BatchEvent[] = [];
  private sent: BatchResult[] = [];
  private sending: Promise<void> = Promise.resolve();
  private failure: { error: unknown } | null = null;

  constructor(
    private readonly client: Bulkhead,
    options: BatchOptions = {},
  ) {
    const maxEvents = options.maxEvents ?? MAX_EVENTS;
    if (!Number.isInteger(maxEvents) || maxEvents < 1 || maxEvents > MAX_EVENTS) {
      throw new RangeError(`a batch holds 1 to ${MAX_EVENTS} events, not ${maxEvents}`);
    }
    this.maxEvents = maxEvents;
    this.maxBytes = options.maxBytes ?? MAX_BYTES;
    if (!Number.isInteger(this.maxBytes) || this.maxBytes <= FRAME) {
      throw new RangeError(`a batch's body needs more than ${FRAME} bytes, not ${this.maxBytes}`);
    }
  }

  /** How many events wait to be sent. */
  get size(): number {
    return this.waiting.length;
  }

  /** Buffer one event; returns its id (its idempotency key: the given one, or a new one). */
  add<T extends NonGatingType>(type: T, data: EventData[T], options: { id?: string } = {}): string {
    if (!(NON_GATING as readonly string[]).includes(type)) {
      throw new RangeError(
        `${type} is not buffered: send it on its own (bh.send), since what comes next depends on its answer; a batch takes ${NON_GATING.join(", ")}`,
      );
    }
    const id = options.id ?? `msg_${randomUUID().replaceAll("-", "")}`;
    const event: BatchEvent = { id, ...this.client.envelope(type, data) };
    const size = Buffer.byteLength(JSON.stringify(event)) + 1;
    if (size + FRAME > this.maxBytes) {
      throw new RangeError(`the event is ${size - 1} bytes of JSON, more than a batch of ${this.maxBytes} bytes holds: send it on its own (bh.send)`);
    }
    this.waiting.push(event);
    this.sizes.set(event, size);
    const waitingBytes = this.waiting.reduce((sum, e) => sum + (this.sizes.get(e) ?? 0), FRAME);
    if (this.waiting.length >= this.maxEvents || waitingBytes >= this.maxBytes) this.queue();
    return id;
  }

  /** Send what waits (in requests of at most `maxEvents`) and wait for every request: each
   * event's result since the last flush. Throws `BatchRefused` if any event was refused (after
   * every other one was applied). */
  async flush(): Promise<BatchResult[]> {
    this.queue();
    await this.sending;
    if (this.failure) {
      const { error } = this.failure;
      this.failure = null;
      this.waiting = [...this.unsent, ...this.waiting];
      this.unsent = [];
      throw error;
    }
    const results = this.sent;
    this.sent = [];
    if (results.some((r) => r.status >= 400)) throw new BatchRefused(results);
    return results;
  }

  /** Hand what waits to requests sent one after another (the chain never rejects: a failure
   * is kept for `flush`, and what it did not send waits again). */
  private queue(): void {
    while (this.waiting.length > 0) {
      const events = this.waiting.splice(0, this.nextRequest());
      this.sending = this.sending.then(() => this.send(events));
    }
  }

  /** How many waiting events go in the next request: at most `maxEvents`, as many as
   * `maxBytes` hold (one at least). */
  private nextRequest(): number {
    let count = 0;
    let size = FRAME;
    for (const event of this.waiting.slice(0, this.maxEvents)) {
      const each = this.sizes.get(event) ?? 0;
      if (count > 0 && size + each > this.maxBytes) break;
      count += 1;
      size += each;
    }
    return count;
  }

  private async send(events: BatchEvent[]): Promise<void> {
    if (this.failure) {
      this.unsent.push(...events);
      return;
    }
    try {
      const results = await this.client.deliverBatch(this.client.prepareBatch(events));
      for (const event of events) this.sizes.delete(event);
      this.sent.push(...results);
      this.results.push(...results);
    } catch (error) {
      this.failure = { error };
      this.unsent.push(...events);
    }
  }
}
