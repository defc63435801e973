// Types generated from Bulkhead's OpenAPI document (src/schema.ts, by openapi-typescript).
import type { components } from "./schema.js";

type S = components["schemas"];

export type RunOut = S["RunOut"];
export type TaskRow = S["TaskRow"];
export type ClaimRow = S["ClaimRow"];
export type FrontierOut = S["FrontierOut"];
export type ContextOut = S["ContextOut"];
export type EscalationOut = S["EscalationOut"];
export type EscalationRow = S["EscalationRow"];
export type AnswerOut = S["AnswerOut"];
export type Accepted = S["Accepted"] & Record<string, unknown>;
export type BatchResults = S["BatchResults"];
/** One event of a batch: its id, the status it got and the body it would have had alone
 * (Accepted, or `{ errors }`). */
export type BatchResult = Omit<BatchResults["results"][number], "body"> & { body: Record<string, unknown> };
export type Evidence = S["EvidenceIn"];
export type TaskSpec = S["TaskIn"];

/** The `data` of each event type, as the webhook validates it. */
export interface EventData {
  "run.started": S["RunStartedData"];
  "tasks.added": S["TasksAddedData"];
  "task.started": S["TaskStartedData"];
  "claim.posted": S["ClaimPostedData"];
  "claim.checked": S["ClaimCheckedData"];
  "task.finished": S["TaskFinishedData"];
  "capability.changed": S["CapabilityChangedData"];
  "packet.submitted": S["PacketSubmittedData"];
}
export type EventType = keyof EventData;

export const EVENT_TYPES: EventType[] = [
  "run.started",
  "tasks.added",
  "task.started",
  "claim.posted",
  "claim.checked",
  "task.finished",
  "capability.changed",
  "packet.submitted",
];

/** What may wait in a batch: nothing the sender does next depends on the answer right away.
 * task.started (its 409 says whether the task may start), run.started, tasks.added and
 * packet.submitted are sent on their own. */
export const NON_GATING = ["capability.changed", "claim.checked", "claim.posted", "task.finished"] as const satisfies readonly EventType[];
export type NonGatingType = (typeof NON_GATING)[number];

/** One event of a batch as sent: its own id (its idempotency key), type, timestamp and data. */
export type BatchEvent<T extends NonGatingType = NonGatingType> = Omit<S["BatchEvent"], "type" | "data"> & { type: T; data: EventData[T] };
