"""HTTP requests, responses and routing, without I/O (impl/web/server.py is the shell).

A route is a method and a path pattern such as `/admin/v2/tenants/{tenant}`; `{name}` matches
one path segment, `{name+}` the rest of the path. Segments are percent-decoded one by one, so an
encoded `/` (`%2F`) stays inside its segment and can never climb out of it: a segment that is
empty, `.` or `..`, or that holds a `/` or a control character after decoding, is refused with
400 before any handler sees it. Every error, ours or a handler's, is answered as Pulsar answers
one: a status and a JSON body `{"reason": ...}`; an unexpected exception is a 500 with a
one-line reason, never a stack trace.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

log = logging.getLogger(__name__)

_REASONS = {
    200: "OK",
    204: "No Content",
    307: "Temporary Redirect",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    412: "Precondition Failed",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def reason_phrase(status: int) -> str:
    return _REASONS.get(status, "")


class HttpError(Exception):
    """An answer other than success: `status` and the sentence that goes in `{"reason": ...}`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # as sent, still percent-encoded
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    body: bytes = b""
    secure: bool = False  # it came over TLS (https://)

    @classmethod
    def of(
        cls, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"", secure: bool = False
    ) -> Request:
        path, _, query = target.partition("?")
        query_args = dict(parse_qsl(query, keep_blank_values=True))
        return cls(method.upper(), path, query_args, headers or {}, body, secure)

    def json(self) -> Any:
        """The body as JSON; 400 when it is missing or not JSON."""
        if not self.body.strip():
            raise HttpError(400, "a JSON body is required")
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as e:
            raise HttpError(400, f"the body is not valid JSON: {e}") from e
        except RecursionError:  # 200k nested `[`: the parser's stack, not ours to spend
            raise HttpError(400, "the body is not valid JSON: nested too deeply") from None

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.query.get(name)
        if value is None:
            return default
        if value.lower() in ("true", "1", ""):
            return True
        if value.lower() in ("false", "0"):
            return False
        raise HttpError(400, f"query parameter {name!r} must be true or false, not {value!r}")


@dataclass(frozen=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(value, indent=None, sort_keys=False).encode())

    @classmethod
    def empty(cls) -> Response:
        return cls(204, b"", "")

    @classmethod
    def text(cls, text: str, content_type: str = "text/plain; charset=utf-8", status: int = 200) -> Response:
        return cls(status, text.encode(), content_type)

    @classmethod
    def redirect(cls, location: str) -> Response:
        return cls(307, b"", "", (("Location", location),))

    @classmethod
    def error(cls, status: int, reason: str) -> Response:
        return cls.json({"reason": reason}, status)


Handler = Callable[..., Response]


def split_path(path: str) -> list[str]:
    """The decoded segments of a path; 400 for one that could step outside the tree or is not text."""
    raw = path.split("/")
    if raw[0] != "":
        raise HttpError(400, f"the path {path!r} must start with /")
    segments = []
    for piece in raw[1:]:
        try:
            segment = unquote(piece, errors="strict")
        except UnicodeDecodeError as e:
            raise HttpError(400, f"a path segment is not UTF-8: {piece!r}") from e
        if segment in ("", ".", "..") or "/" in segment or _CONTROL.search(segment):
            raise HttpError(400, f"invalid path segment {segment!r} in {path!r}")
        segments.append(segment)
    return segments


@dataclass(frozen=True)
class _Route:
    method: str
    parts: tuple[str, ...]
    handler: Handler

    def match(self, segments: list[str]) -> dict[str, str] | None:
        params: dict[str, str] = {}
        for i, part in enumerate(self.parts):
            if part.endswith("+}"):
                if i >= len(segments):
                    return None
                params[part[1:-2]] = "/".join(segments[i:])
                return params
            if i >= len(segments):
                return None
            if part.startswith("{"):
                params[part[1:-1]] = segments[i]
            elif part != segments[i]:
                return None
        return params if len(segments) == len(self.parts) else None


class Router:
    """Routes in the order added: the first whose pattern and method match is called. `translate`
    turns an exception a handler raises into the HttpError to answer (None: an internal error)."""

    def __init__(self, translate: Callable[[Exception], HttpError | None] = lambda e: None) -> None:
        self._routes: list[_Route] = []
        self.translate = translate

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        parts = tuple(p for p in pattern.split("/") if p)
        self._routes.append(_Route(method.upper(), parts, handler))

    def get(self, pattern: str) -> Callable[[Handler], Handler]:
        return self._decorator("GET", pattern)

    def put(self, pattern: str) -> Callable[[Handler], Handler]:
        return self._decorator("PUT", pattern)

    def post(self, pattern: str) -> Callable[[Handler], Handler]:
        return self._decorator("POST", pattern)

    def delete(self, pattern: str) -> Callable[[Handler], Handler]:
        return self._decorator("DELETE", pattern)

    def _decorator(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.add(method, pattern, handler)
            return handler

        return register

    def __call__(self, request: Request) -> Response:
        try:
            return self._dispatch(request)
        except HttpError as e:
            return Response.error(e.status, e.reason)
        except Exception as e:
            known = self.translate(e)
            if known is not None:
                return Response.error(known.status, known.reason)
            log.exception("%s %s failed", request.method, request.path)  # a bug: say what, keep serving
            return Response.error(500, f"internal error: {type(e).__name__}: {e}")

    def _dispatch(self, request: Request) -> Response:
        segments = split_path(request.path) if request.path != "/" else []
        allowed = []
        for route in self._routes:
            params = route.match(segments)
            if params is None:
                continue
            if route.method == request.method or (route.method == "GET" and request.method == "HEAD"):
                return route.handler(request, **params)
            allowed.append(route.method)
        if allowed:
            raise HttpError(405, f"{request.method} is not allowed on {request.path}; allowed: {', '.join(allowed)}")
        raise HttpError(404, f"no such resource: {request.path}")
