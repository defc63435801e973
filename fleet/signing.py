"""Standard Webhooks v1 signatures: the one signing module for inbound and outbound webhooks."""

import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

TOLERANCE_SECONDS = 5 * 60


class SignatureError(Exception):
    """Any authentication failure; callers answer them all alike."""


def sign(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers for a body signed with one secret."""
    moment = datetime.fromtimestamp(timestamp, tz=UTC)
    signature = Webhook(secret).sign(msg_id=msg_id, timestamp=moment, data=body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def verify(secrets: Iterable[str], *, headers: Mapping[str, str], body: bytes) -> None:
    """Pass if any active secret signed the body within the tolerance; raise SignatureError otherwise."""
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    if not msg_id or not stamp or not headers.get("webhook-signature"):
        raise SignatureError("missing headers")
    try:
        if abs(time.time() - float(stamp)) > TOLERANCE_SECONDS:
            raise SignatureError("timestamp outside tolerance")
        body.decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise SignatureError("unreadable") from exc
    for secret in secrets:
        try:
            Webhook(secret).verify(body, dict(headers), json_parse=False)
            return
        except (WebhookVerificationError, ValueError, TypeError):
            continue
    raise SignatureError("no matching signature")
