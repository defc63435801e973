"""The packet page's evidence: each entry with its re-check's verdict and the facts it read."""

import json
from collections.abc import Mapping
from typing import Any

from escalations.models import FailurePacket

ROWS_SHOWN = 20
TEXT_SHOWN = 4_000


def evidence_rows(packet: FailurePacket | None) -> list[dict[str, Any]]:
    """Each evidence entry of the packet: what it says, the verdict of its re-check (or that
    the re-check is pending), and the payload to read — what reality gave when the re-check read
    it, and the agent's own copy when that differs."""
    if packet is None or not isinstance(packet.content, dict):
        return []
    entries = packet.content.get("evidence")
    if not isinstance(entries, list):
        return []
    checks = packet.checks if isinstance(packet.checks, list) else []
    copy = "As Bulkhead drafted it" if packet.drafted else "As the agent sent it"
    rows = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue
        check = checks[i] if i < len(checks) and not packet.checks_pending else None
        kind = str(entry.get("kind", ""))
        sent = entry.get("payload")
        real = check.get("payload") if isinstance(check, Mapping) else None
        rows.append(
            {
                "index": i,
                "kind": kind,
                "source": str(entry.get("source", "")),
                "datasource": entry.get("datasource") or "",
                "workspace": entry.get("workspace") or "",
                "payload_hash": str(entry.get("payload_hash", "")),
                "pending": packet.checks_pending,
                "status": str(check.get("status", "unverified")) if check else "unverified",
                "reason": str(check.get("reason", "")) if check else "not re-checked",
                "reality": payload_view(kind, real) if isinstance(real, Mapping) else None,
                "sent": payload_view(kind, sent)
                if isinstance(sent, Mapping) and sent != real
                else None,
                "sent_label": sent_label(
                    copy, pending=packet.checks_pending, read=real is not None
                ),
            }
        )
    return rows


def sent_label(copy: str, *, pending: bool, read: bool) -> str:
    if pending:
        return f"{copy} (not re-checked yet)"
    if read:
        return f"{copy}: it differs from what the re-check read"
    return f"{copy} (the re-check could not read reality to compare)"


def payload_view(kind: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of a payload as a reviewer reads them, by kind (anything else as JSON)."""
    if "too_large" in payload:
        return {"kind": "too_large", "bytes": payload["too_large"]}
    if kind == "query_result":
        columns = payload.get("columns")
        rows = payload.get("rows")
        if isinstance(columns, list) and isinstance(rows, list):
            total = payload.get("rows_total", len(rows))
            return {
                "kind": kind,
                "columns": [str(c) for c in columns],
                "rows": [
                    [cell(v) for v in r] if isinstance(r, list) else [cell(r)]
                    for r in rows[:ROWS_SHOWN]
                ],
                "total": total if isinstance(total, int) else len(rows),
            }
    if kind == "file_read" and isinstance(payload.get("text"), str):
        lines = payload.get("lines")
        span = (
            f"{lines[0]}-{lines[1]}"
            if isinstance(lines, list) and len(lines) == 2
            else str(lines or "")
        )
        text = payload["text"]
        return {
            "kind": kind,
            "path": str(payload.get("path", "")),
            "lines": span,
            "text": text[:TEXT_SHOWN],
            "cut": len(text) > TEXT_SHOWN or "text_total" in payload,
        }
    if kind == "test_run" and "exit_code" in payload:
        return {
            "kind": kind,
            "command": str(payload.get("command", "")),
            "exit_code": cell(payload.get("exit_code")),
            "output_sha256": str(payload.get("output_sha256", "")),
        }
    if kind == "http_exchange":
        request = payload.get("request")
        response = payload.get("response")
        if isinstance(request, Mapping) and isinstance(response, Mapping):
            return {
                "kind": kind,
                "method": str(request.get("method", "")),
                "url": str(request.get("url", "")),
                "status": cell(response.get("status")),
                "body_sha256": str(response.get("body_sha256", "")),
            }
    return {"kind": "other", "json": cell(dict(payload))}


def cell(value: object) -> str:
    """A value as the page prints it: JSON's null, true and false, not Python's."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
