// What the client throws: one base type, the server's `errors` on every refusal.

export interface ErrorItem {
  loc: string;
  msg: string;
}

export class BulkheadError extends Error {}

/** Bulkhead answered 4xx: `errors` names what is wrong. A refused event was not applied. */
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

/** 401: a wrong secret or token, a stale webhook-timestamp, an unknown agent. */
export class Unauthorized extends Refused {}

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

/** Bulkhead stayed unavailable for every try: send the event again later with the same webhook-id. */
export class RetriesExhausted extends BulkheadError {
  constructor(
    message: string,
    readonly attempts: number,
    readonly lastStatus: number | null,
  ) {
    super(message);
  }
}
