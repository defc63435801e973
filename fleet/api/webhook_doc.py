"""The write side in the OpenAPI document: the signed webhook's event bodies (each type a schema
with an example), its answers and error bodies, the batch endpoint, and the notifications a
fleet's callback is sent (OpenAPI `webhooks`).

The event schemas are generated from the models the intake validates with (`fleet.events`), so
the document cannot say other than what the webhook accepts.
"""

from typing import Any

from fleet.api.packet_doc import Packet
from fleet.events import DATA_MODELS
from fleet.outbox import EVENT_TYPES as NOTIFICATIONS

REF = "#/components/schemas/"
HASH = "sha256:a78a387c228fd00996f3c56b3bc237b91eafd6c8720ff34bac9b49fe1c4afaf8"
COLUMNS_QUERY = (
    "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
    "AND table_name = 'customers' ORDER BY ordinal_position"
)
EVIDENCE = {
    "kind": "query_result",
    "datasource": "orders",
    "source": COLUMNS_QUERY,
    "payload_hash": HASH,
    "payload": {
        "columns": ["column_name"],
        "rows": [["id"], ["name"], ["email"], ["loyalty_points"]],
    },
}

# One example of each event's data (the all-green story's, where it has one).
EXAMPLES: dict[str, dict[str, Any]] = {
    "run.started": {
        "run": "tier-discounts",
        "title": "Add tier-based discounts",
        "tasks": [
            {"key": "plan", "agent": "planner"},
            {"key": "confirm-schema", "agent": "schema", "prerequisites": ["plan"],
             "checks": ["plan.customer-tier"]},
            {"key": "api-change", "agent": "coder", "prerequisites": ["confirm-schema"],
             "capabilities": ["forge"], "effect": "external"},
        ],
    },
    "tasks.added": {
        "run": "tier-discounts",
        "tasks": [{"key": "api-tests", "agent": "coder", "prerequisites": ["api-change"]}],
    },
    "task.started": {
        "run": "tier-discounts",
        "task": "plan",
        "attempt": {"prompt_hash": "sha256:1f0c…", "context_hash": "sha256:9a41…"},
    },
    "claim.posted": {
        "run": "tier-discounts",
        "task": "plan",
        "claim": {
            "key": "plan.customer-tier",
            "statement": "Use the existing `customer_tier` column on `customers`",
            "load_bearing": True,
            "about": ["customers.customer_tier"],
        },
    },
    "claim.checked": {
        "run": "tier-discounts",
        "task": "confirm-schema",
        "claim": "plan.customer-tier",
        "verdict": "refuted",
        "evidence": EVIDENCE,
    },
    "task.finished": {
        "run": "tier-discounts",
        "task": "plan",
        "outcome": "failed",
        "failure": {"kind": "reasoning", "signature": "no-tier-source",
                    "message": "no table or column holds a customer's tier"},
    },
    "capability.changed": {
        "capability": "forge", "status": "down", "reason": "GitHub answers 503",
    },
    "packet.submitted": {
        "run": "tier-discounts",
        "task": "plan",
        "packet": {
            "task": "plan",
            "tried": ["Resolve the discount rule via customers.customer_tier"],
            "ruled_out": [{"hypothesis": "the column exists under another name",
                           "how": "searched customers and loyalty_* for tier-like columns"}],
            "evidence": [EVIDENCE],
            "smallest_unblocking_question": "Where does a customer's tier come from today?",
            "options": ["Add a customer_tier column",
                        "Use the loyalty_points threshold in pricing-config.yaml"],
        },
    },
}  # fmt: skip

ANSWERS: dict[str, dict[str, Any]] = {
    "run.started": {"run": "tier-discounts", "created": True, "tasks": 3},
    "tasks.added": {"run": "tier-discounts", "tasks": 1},
    "task.started": {"run": "tier-discounts", "task": "plan", "attempt": 1},
    "claim.posted": {"run": "tier-discounts", "claim": "plan.customer-tier",
                     "status": "unverified", "reason": "posted without evidence"},
    "claim.checked": {"run": "tier-discounts", "claim": "plan.customer-tier",
                      "status": "unverified", "verdict": "pending verification"},
    "task.finished": {"run": "tier-discounts", "task": "plan", "state": "failed"},
    "capability.changed": {"capability": "forge", "status": "down"},
    "packet.submitted": {"run": "tier-discounts", "task": "plan", "escalation": 12,
                         "packet": "opened"},
}  # fmt: skip

# What each notification's data carries (beyond `run`), with an example.
NOTIFICATION_FIELDS: dict[str, tuple[str, dict[str, Any]]] = {
    "task.ready": ("A task may start now; `refresh` lists capabilities to re-read first.",
                   {"task": "plan", "agent": "planner"}),
    "task.deferred": ("A task waits on a hard blocker, or was ready and no longer is (do not "
                      "start it): `blockers` says on what.",
                      {"task": "api-change", "agent": "coder", "blockers": ["capability:forge"]}),
    "task.reframed": ("The task's next attempt gets this ground truth and scope.",
                      {"task": "plan", "agent": "planner", "attempt": 1, "reason": "…",
                       "ground_truth": [{"claim": "plan.customer-tier", "payload": EVIDENCE["payload"]}],
                       "scope": "…"}),
    "task.rerouted": ("The task is handed to another agent (or a tool).",
                      {"task": "plan", "from": "planner", "to": "planner-2", "agent": "planner-2",
                       "tool": False}),
    "task.resume": ("Resume the attempt that left killed background work.",
                    {"task": "implement", "agent": "coder", "killed": ["mvnw-test"]}),
    "task.retry": ("Retry the task (a transient failure) not before the time given.",
                   {"task": "push", "agent": "coder", "not_before": "2026-06-02T09:05:00Z"}),
    "task.halted": ("A claim the running task builds on was refuted: stop building on it.",
                    {"task": "api-change", "agent": "coder", "attempt": 1,
                     "claim": "plan.customer-tier", "statement": "…", "reason": "…",
                     "ground_truth": []}),
    "packet.requested": ("Bulkhead drafted the packet: send what is `missing`.",
                         {"escalation": 12, "task": "plan", "agent": "planner", "attempt": 2,
                          "reason": "…", "missing": ["smallest_unblocking_question"],
                          "draft": {"task": "plan", "tried": ["…"], "ruled_out": [],
                                    "evidence": [EVIDENCE], "smallest_unblocking_question": ""}}),
    "packet.returned": ("A reviewer returned the packet: fix `field` as `reason` says.",
                        {"escalation": 12, "task": "plan", "agent": "planner", "field": "tried",
                         "reason": "say which tier sources you searched", "by": "reviewer:alice"}),
    "escalation.opened": ("An escalation waits for a reviewer.",
                          {"escalation": 12, "task": "plan", "question": "…?",
                           "reopened": False, "drafted": False}),
    "escalation.answered": ("The reviewer's answer: the task is reframed with it.",
                            {"escalation": 12, "task": "plan", "question": "…?",
                             "answer": "Use the loyalty_points threshold in pricing-config.yaml",
                             "by": "reviewer:alice", "released": ["plan"]}),
    "run.succeeded": ("Every task of the run succeeded.", {}),
    "run.failed": ("The run failed; `cause` is the full cause.",
                   {"task": "pr-check", "cause": "…"}),
}  # fmt: skip

ERROR_STATUSES = {
    "400": "The body is not UTF-8 or not JSON, or the webhook-id is unusable.",
    "401": "Missing or invalid signature, a webhook-timestamp off by more than 5 minutes, or an "
    "unknown agent (the same body for each).",
    "403": "The agent acts on a task that is not its own (an orchestrator names the agent in "
    "data.agent).",
    "409": "The same webhook-id with a different body; a run declared again with other tasks; a "
    'task.started refused: `{"loc": "blockers", "msg": "claim:plan.customer-tier"}` for '
    "each blocker, with the reasons beside them, and the blockers again as a list: "
    '`"blockers": ["claim:plan.customer-tier"]`.',
    "411": "A chunked body (no Content-Length) behind a server that cannot say where it ends: "
    "send it with a Content-Length.",
    "413": "A body over 1 MiB (a packet over 64 KiB).",
    "415": "A content type other than application/json.",
    "422": "A schema or reference error: every bad field is named in `loc`.",
    "429": "Too many requests from this agent: retry after `Retry-After` seconds, same webhook-id.",
    "503": "The database is unavailable: retry after `Retry-After` seconds, same webhook-id "
    "(nothing was half-written).",
}

SIGNED = [
    {"name": "webhook-id", "in": "header", "required": True,
     "description": "The event's idempotency key (at most 200 characters): the same id and body "
     "again get the first answer, applied once.", "schema": {"type": "string"}},
    {"name": "webhook-timestamp", "in": "header", "required": True,
     "description": "Unix seconds; within 5 minutes of the server's clock.",
     "schema": {"type": "string"}},
    {"name": "webhook-signature", "in": "header", "required": True,
     "description": "`v1,<base64 HMAC-SHA256 of \"{id}.{timestamp}.{raw body}\">` with the "
     "agent's signing secret (Standard Webhooks v1); a space-separated list while keys rotate.",
     "schema": {"type": "string"}},
    {"name": "agent_id", "in": "path", "required": True, "schema": {"type": "string"},
     "description": "The agent's id, as agent_create printed it."},
]  # fmt: skip


def schema_name(event_type: str, suffix: str = "Event") -> str:
    return "".join(part.capitalize() for part in event_type.split(".")) + suffix


def hoist(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema with its `$defs` moved into the document's components."""
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    text = _rewrite_refs(schema)
    return text


def _rewrite_refs(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (
                v.replace("#/$defs/", REF)
                if k == "$ref" and isinstance(v, str)
                else _rewrite_refs(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_rewrite_refs(v) for v in value]
    return value


def errors_response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF + "Errors"}}},
    }


def write_side(components: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The webhook's paths and the notifications (`webhooks`), adding their schemas."""
    events = []
    for event_type, model in DATA_MODELS.items():
        data_name = schema_name(event_type, "Data")
        data = hoist(model.model_json_schema(ref_template=REF + "{model}"), components)
        data["title"] = data_name
        data["examples"] = [EXAMPLES[event_type]]
        if event_type == "packet.submitted":  # a JSON object the desk validates: its fields
            packet = hoist(Packet.model_json_schema(ref_template=REF + "{model}"), components)
            components["Packet"] = packet
            data["properties"]["packet"] = {"$ref": REF + "Packet"}
        components[data_name] = data
        name = schema_name(event_type)
        components[name] = {
            "title": name,
            "description": f"The `{event_type}` event.",
            "type": "object",
            "additionalProperties": False,
            "required": ["type", "timestamp", "data"],
            "properties": {
                "type": {"const": event_type},
                "timestamp": {"type": "string", "format": "date-time",
                              "description": "The agent's own clock (kept as what it said)."},
                "data": {"$ref": REF + data_name},
            },
            "examples": [{"type": event_type, "timestamp": "2026-06-02T09:01:00Z",
                          "data": EXAMPLES[event_type]}],
        }  # fmt: skip
        events.append(name)
    components["WebhookEvent"] = {
        "title": "WebhookEvent",
        "description": "One event: its `type` says which schema its `data` follows.",
        "oneOf": [{"$ref": REF + n} for n in events],
        "discriminator": {
            "propertyName": "type",
            "mapping": {t: REF + schema_name(t) for t in DATA_MODELS},
        },
    }
    components["Accepted"] = {
        "title": "Accepted",
        "description": "The event was applied: its id, its type, and what each type adds "
        "(`run`, `task`, `attempt`, `claim`, `status`, `escalation`, ...).",
        "type": "object",
        "required": ["event", "type"],
        "properties": {"event": {"type": "string"}, "type": {"type": "string"}},
        "additionalProperties": True,
        "examples": [{"event": "4f1c…", "type": t, **a} for t, a in ANSWERS.items()],
    }
    components["BatchEvent"] = {
        "title": "BatchEvent",
        "type": "object",
        "required": ["id", "type", "timestamp", "data"],
        "properties": {
            "id": {"type": "string", "description": "The event's idempotency key."},
            "type": {"type": "string", "enum": list(DATA_MODELS)},
            "timestamp": {"type": "string", "format": "date-time"},
            "data": {"type": "object", "description": "As the event type's own schema."},
        },
    }
    components["Batch"] = {
        "title": "Batch",
        "type": "object",
        "required": ["events"],
        "properties": {
            "events": {"type": "array", "maxItems": 500, "items": {"$ref": REF + "BatchEvent"}}
        },
    }
    components["BatchResults"] = {
        "title": "BatchResults",
        "type": "object",
        "required": ["results"],
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "status", "body"],
                    "properties": {
                        "id": {"type": "string"},
                        "status": {"type": "integer",
                                   "description": "The status the event alone would get."},
                        "body": {"type": "object",
                                 "description": "Its answer: Accepted, or the errors body."},
                    },
                },
            }
        },
    }  # fmt: skip
    refusals = {status: errors_response(text) for status, text in ERROR_STATUSES.items()}
    paths = {
        "/hooks/v1/agents/{agent_id}/events": {
            "post": {
                "operationId": "agent_event",
                "tags": ["webhook"],
                "summary": "Send one signed event (Standard Webhooks v1)",
                "description": "The body's bytes are signed as sent. A refused event (4xx) is "
                "not recorded: fix it and send it again, with the same webhook-id or another.",
                "parameters": SIGNED,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": REF + "WebhookEvent"}}},
                },
                "responses": {
                    "202": {
                        "description": "Applied (or the first answer again, for a repeated "
                        "webhook-id and body).",
                        "content": {"application/json": {"schema": {"$ref": REF + "Accepted"}}},
                    },
                    **refusals,
                },
            }
        },
        "/hooks/v1/agents/{agent_id}/batches": {
            "post": {
                "operationId": "agent_batch",
                "tags": ["webhook"],
                "summary": "Send up to 500 events in one signed request",
                "description": "Applied in order, each idempotent on its own `id`; each gets "
                "the status and body it would have had alone.",
                "parameters": SIGNED,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": REF + "Batch"}}},
                },
                "responses": {
                    "200": {
                        "description": "Each event's result, in order.",
                        "content": {"application/json": {"schema": {"$ref": REF + "BatchResults"}}},
                    },
                    **refusals,
                },
            }
        },
    }
    webhooks = {}
    for note in NOTIFICATIONS:
        description, example = NOTIFICATION_FIELDS[note]
        name = schema_name(note, "Notification")
        components[name] = {
            "title": name,
            "description": description,
            "type": "object",
            "required": ["type", "timestamp", "data"],
            "properties": {
                "type": {"const": note},
                "timestamp": {"type": "string", "format": "date-time"},
                "data": {
                    "type": "object",
                    "required": ["run", *example],
                    "properties": {"run": {"type": "string"},
                                   **{k: {} for k in example}},
                    "additionalProperties": True,
                },
            },
            "examples": [{"type": note, "timestamp": "2026-06-02T09:03:00Z",
                          "data": {"run": "tier-discounts", **example}}],
        }  # fmt: skip
        webhooks[note] = {
            "post": {
                "summary": description,
                "description": "Sent to the fleet's callback URL, signed with the fleet's "
                "callback secret (Standard Webhooks v1), at least once under one webhook-id.",
                "requestBody": {"content": {"application/json": {"schema": {"$ref": REF + name}}}},
                "responses": {"200": {"description": "Received (any 2xx)."}},
            }
        }
    return paths, webhooks
