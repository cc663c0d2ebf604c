"""A small HTTP client for the admin REST API: JSON in and out, 307 redirects followed as
Pulsar's admin client follows them (same method, same body), errors raised with Pulsar's reason."""

from __future__ import annotations

import http.client
import json
import ssl
from typing import Any
from urllib.parse import urljoin, urlsplit

from impl.web.http import HttpError

MAX_REDIRECTS = 5


class Unreachable(HttpError):
    """No answer: the server is down or the URL is wrong (status 0)."""

    def __init__(self, url: str, cause: Exception) -> None:
        super().__init__(0, f"cannot reach {url}: {cause}")


def call(
    method: str,
    url: str,
    body: Any = None,
    timeout_s: float = 30.0,
    raw: bool = False,
    headers: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Any:
    """Send a request; the decoded JSON answer (None for an empty one), or the text when `raw`.
    An error status raises HttpError with the server's reason. `tls`: how to check https:// servers
    (default: the system's CAs)."""
    data = None if body is None else json.dumps(body).encode()
    status, _, content = exchange(method, url, data, timeout_s, headers, tls)
    if status >= 400:
        raise HttpError(status, _reason(content) or f"HTTP {status} from {method} {url}")
    if raw:
        return content.decode("utf-8", "replace")
    return json.loads(content) if content.strip() else None


def exchange(
    method: str,
    url: str,
    data: bytes | None,
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request and its final answer, whatever the status: (status, headers, body), redirects followed
    with the same method, body and headers."""
    for _ in range(MAX_REDIRECTS + 1):
        status, answer_headers, content = _send(method, url, data, timeout_s, headers or {}, tls)
        if status in (301, 302, 307, 308) and "location" in answer_headers:
            url = urljoin(url, answer_headers["location"])
            continue
        return status, answer_headers, content
    raise HttpError(508, f"{method} {url}: more than {MAX_REDIRECTS} redirects")


def _send(
    method: str, url: str, data: bytes | None, timeout_s: float, extra: dict[str, str], tls: ssl.SSLContext | None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise HttpError(400, f"{url!r} is not an http(s)://HOST:PORT/... URL")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        context = tls or ssl.create_default_context()
        connection = http.client.HTTPSConnection(parts.hostname, port or 443, timeout=timeout_s, context=context)
    else:
        connection = http.client.HTTPConnection(parts.hostname, port or 80, timeout=timeout_s)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = {"Accept": "application/json", **extra}
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        connection.request(method, target, body=data, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    except (OSError, http.client.HTTPException) as e:
        raise Unreachable(url, e) from e
    finally:
        connection.close()


def _reason(content: bytes) -> str:
    try:
        doc = json.loads(content)
    except ValueError:
        return content.decode("utf-8", "replace").strip()[:500]
    return str(doc.get("reason", doc)) if isinstance(doc, dict) else str(doc)


def reason_of(content: bytes) -> str:
    """The sentence of an error answer (Pulsar's {"reason": ...}, or its text)."""
    return _reason(content)
