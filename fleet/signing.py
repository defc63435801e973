"""Standard Webhooks v1 signatures: the one signing module for inbound and outbound webhooks."""

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping

TOLERANCE_SECONDS = 5 * 60
SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret


class SignatureError(Exception):
    """Any authentication failure; callers answer them all alike."""


def _key(secret: str) -> bytes:
    encoded = secret.removeprefix(SECRET_PREFIX)
    # Unpadded base64 is accepted, as the reference library does (extra padding is ignored).
    key = base64.b64decode(encoded + "==")
    if not key:
        raise ValueError("an empty signing secret")
    return key


def _digest(key: bytes, *, msg_id: str, timestamp: str, body: bytes) -> bytes:
    # The raw body bytes, as received: a body that is not UTF-8 is still signed exactly.
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers for a body signed with one secret."""
    digest = _digest(_key(secret), msg_id=msg_id, timestamp=str(timestamp), body=body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


def _passed(header: str) -> list[bytes]:
    """The v1 signatures of a `webhook-signature` list; unreadable entries are skipped."""
    found = []
    for entry in header.split(" "):
        version, _, encoded = entry.partition(",")
        if version != "v1" or not encoded:
            continue
        try:
            found.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    return found


def verify(secrets: Iterable[str], *, headers: Mapping[str, str], body: bytes) -> None:
    """Pass if any active secret signed the raw body within the tolerance; else SignatureError.

    The HMAC covers the bytes as received: whether they are UTF-8 or JSON is the caller's
    question to answer (400), after the sender is known.
    """
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    header = headers.get("webhook-signature", "")
    if not msg_id or not stamp or not header:
        raise SignatureError("missing headers")
    try:
        seconds = int(stamp)
    except ValueError as exc:
        raise SignatureError("unreadable timestamp") from exc
    if abs(time.time() - seconds) > TOLERANCE_SECONDS:
        raise SignatureError("timestamp outside tolerance")
    passed = _passed(header)
    matched = False
    for secret in secrets:
        try:
            expected = _digest(_key(secret), msg_id=msg_id, timestamp=stamp, body=body)
        except (binascii.Error, ValueError):
            continue
        # Every secret and every signature is compared: the time taken names none of them.
        for signature in passed:
            matched |= hmac.compare_digest(expected, signature)
    if not matched:
        raise SignatureError("no matching signature")
