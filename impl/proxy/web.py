"""The proxy's web port: every HTTP request (admin REST API, lookups, metrics, the cluster view) is
passed to a live broker's web service, and a 307 to a topic's owner is followed here, so a client
that can reach only the proxy still reaches the owner."""

from __future__ import annotations

import ssl
from urllib.parse import urlencode

from impl.proxy.directory import BrokerDirectory
from impl.web import client
from impl.web.http import HttpError, Request, Response, Router
from impl.web.server import WebServer

TIMEOUT_S = 30.0
_PASSED_HEADERS = ("content-type", "location")


def router(directory: BrokerDirectory) -> Router:
    def forward(req: Request, rest: str = "") -> Response:
        urls = directory.web_urls()
        if not urls:
            raise HttpError(503, "no live broker is registered in the metadata store; retry")
        target = req.path + (f"?{_query(req)}" if req.query else "")
        # The client's credentials go to the broker, which authenticates and authorizes them.
        passed = {"Authorization": req.headers["authorization"]} if "authorization" in req.headers else {}
        failure = ""
        for url in urls:
            try:
                status, headers, body = client.exchange(req.method, url + target, req.body or None, TIMEOUT_S, passed)
            except client.Unreachable as e:
                failure = e.reason
                continue
            kept = tuple((name.title(), headers[name]) for name in _PASSED_HEADERS[1:] if name in headers)
            return Response(status, body, headers.get("content-type", ""), kept)
        raise HttpError(503, f"no broker answered: {failure}; retry")

    r = Router()
    for method in ("GET", "PUT", "POST", "DELETE"):
        r.add(method, "/", forward)
        r.add(method, "/{rest+}", forward)
    return r


def _query(req: Request) -> str:
    return urlencode(req.query)


def web_server(directory: BrokerDirectory, host: str, port: int, tls: ssl.SSLContext | None = None) -> WebServer:
    return WebServer(router(directory), host, port, name="proxy-tls" if tls else "proxy", tls=tls)
