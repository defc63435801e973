// What the client throws: one base type, the server's `errors` on every refusal.
import type { PreparedEvent } from "./client.js";

export interface ErrorItem {
  loc: string;
  msg: string;
}

export class BulkheadError extends Error {}

/** Bulkhead answered with an error it would answer again (4xx, or a 500): `errors` names what is
 * wrong. A 4xx event was not applied; a 500 is not retried and wrote nothing of the event. */
export class Refused extends BulkheadError {
  constructor(
    readonly status: number,
    readonly errors: ErrorItem[],
    readonly body?: unknown,
  ) {
    super(`${status}: ${errors.map((e) => `${e.loc}: ${e.msg}`).join("; ") || JSON.stringify(body)}`);
  }

  messages(loc: string): string[] {
    return this.errors.filter((e) => e.loc === loc).map((e) => e.msg);
  }
}

/** 401: a wrong secret or token, a stale webhook-timestamp, an unknown agent (the server answers
 * them alike). `clockSkewMs`: how far this machine's clock is ahead of the server's, by its Date
 * header (null without one); more than 4 minutes is said in the message. */
export class Unauthorized extends Refused {
  constructor(
    status: number,
    errors: ErrorItem[],
    body?: unknown,
    readonly clockSkewMs: number | null = null,
  ) {
    super(status, errors, body);
    if (clockSkewMs !== null && Math.abs(clockSkewMs) > 240_000) {
      const seconds = Math.round(clockSkewMs / 1000);
      this.message += `; this machine's clock is ${seconds > 0 ? "+" : ""}${seconds} s from the server's (its Date header): a webhook-timestamp more than 5 minutes off is refused, so set the clock right (NTP)`;
    }
  }
}

/** 409 from task.started: `blockers` are the typed blockers, `reasons` say why beside them. */
export class Blocked extends Refused {
  readonly blockers: string[];
  readonly reasons: ErrorItem[];

  constructor(status: number, errors: ErrorItem[], body?: unknown) {
    super(status, errors, body);
    this.blockers = errors.filter((e) => e.loc === "blockers").map((e) => e.msg);
    this.reasons = errors.filter((e) => e.loc !== "blockers");
  }
}

/** Bulkhead stayed unavailable (429, 502-504, no connection or no answer within `timeoutMs`)
 * for every try. The event may or may not have been applied: `event` is the signed event as it
 * was sent (undefined for a read), and `bh.deliver(error.event)` sends it again later under the
 * same webhook-id and body, which Bulkhead applies at most once. (Sending the same data again
 * with `send` makes a new body, a new timestamp: a 409 under the old webhook-id.) */
export class RetriesExhausted extends BulkheadError {
  constructor(
    message: string,
    readonly attempts: number,
    readonly lastStatus: number | null,
    readonly event?: PreparedEvent,
  ) {
    super(message);
  }
}
