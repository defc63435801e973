// Types generated from Bulkhead's OpenAPI document (src/schema.d.ts, by openapi-typescript).
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
