"""The http_exchange verifier: re-fetch a GET or HEAD from an allowed host and hash the body."""

import hashlib
import time
from collections.abc import Mapping
from typing import Any, Final

import httpx

from runs.claims.hashing import http_exchange_payload
from runs.claims.verifiers.base import (
    Limits,
    Sources,
    Verdict,
    _Evidence,
    _judge,
    _seconds,
    _Unverifiable,
)

_REFETCHED_METHODS: Final = frozenset({"GET", "HEAD"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def _reach_http(claimed: _Evidence, sources: Sources) -> tuple[str, httpx.URL, frozenset[str]]:
    """The method and URL to send again and the allowed hosts, or why it may not be sent."""
    method = _claimed_method(claimed.payload)
    if method not in _REFETCHED_METHODS:
        raise _Unverifiable(
            f"only GET and HEAD are re-fetched; a {method} may change something, so it was not "
            "sent again"
        )
    try:
        url = httpx.URL(claimed.source)
    except httpx.InvalidURL as error:
        raise _Unverifiable(f"the source is not a URL: {error}") from None
    if url.scheme not in _DEFAULT_PORTS or not url.host:
        raise _Unverifiable("the source must be an http:// or https:// URL")
    hosts = frozenset(host.strip().lower() for host in sources.hosts)
    if not _host_allowed(url, hosts):
        raise _Unverifiable(
            f"{_host_and_port(url)} is not an allowed host for this fleet, so it was not fetched"
        )
    return method, url, hosts


def _verify_http(claimed: _Evidence, sources: Sources, limits: Limits) -> Verdict:
    method, url, hosts = _reach_http(claimed, sources)
    status, body_sha256 = _fetch(method, url, hosts, limits)
    observed = http_exchange_payload(
        method=method, url=claimed.source, status=status, body_sha256=body_sha256
    )
    summary = f"it answers {status} with a body whose sha256 is {body_sha256}"
    return _judge(claimed, observed, f"re-fetched {method} {claimed.source}", summary)


def _claimed_method(payload: Mapping[str, Any] | None) -> str:
    request = payload.get("request") if payload else None
    method = request.get("method") if isinstance(request, Mapping) else None
    return method.upper() if isinstance(method, str) else "GET"


def _host_and_port(url: httpx.URL) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{url.port or _DEFAULT_PORTS.get(url.scheme)}"


def _host_allowed(url: httpx.URL, hosts: frozenset[str]) -> bool:
    """`host` allows the scheme's default port only; `host:port` allows that port."""
    default_port = _DEFAULT_PORTS.get(url.scheme)
    if default_port is None:
        return False
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or default_port
    return f"{host}:{port}" in hosts or (port == default_port and host in hosts)


def _fetch(method: str, url: httpx.URL, hosts: frozenset[str], limits: Limits) -> tuple[int, str]:
    deadline = time.monotonic() + limits.http_timeout
    target = url
    try:
        with httpx.Client(
            timeout=limits.http_timeout,
            follow_redirects=False,
            trust_env=False,
            headers={"user-agent": "bulkhead-verifier"},
        ) as client:
            for _ in range(limits.max_redirects + 1):
                with client.stream(method, target) as response:
                    if response.is_redirect:
                        target = target.join(response.headers["location"])
                        if target.host != url.host or not _host_allowed(target, hosts):
                            raise _Unverifiable(
                                f"the server redirects to {target}, another host; the verifier "
                                "does not follow redirects off the host"
                            )
                        continue
                    return response.status_code, _body_sha256(response, deadline, limits)
    except httpx.TimeoutException:
        raise _timed_out(limits) from None
    except httpx.InvalidURL as error:
        raise _Unverifiable(f"the server redirects to an invalid URL: {error}") from None
    except httpx.HTTPError as error:
        raise _Unverifiable(f"could not fetch {url}: {error}") from None
    raise _Unverifiable(f"the server redirects more than {limits.max_redirects} times")


def _body_sha256(response: httpx.Response, deadline: float, limits: Limits) -> str:
    digest = hashlib.sha256()
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise _Unverifiable(
                f"the body is over {limits.max_body_bytes} bytes; the verifier stopped reading it"
            )
        if time.monotonic() > deadline:
            raise _timed_out(limits)
        digest.update(chunk)
    return digest.hexdigest()


def _timed_out(limits: Limits) -> _Unverifiable:
    return _Unverifiable(f"the host did not answer within {_seconds(limits.http_timeout)}")
