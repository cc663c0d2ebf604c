"""The broker's web service: Pulsar's admin REST API v2, HTTP lookup, /metrics and the cluster view."""

from __future__ import annotations

from collections.abc import Callable

from impl.broker.web import admin, lookup, metrics, topics, view
from impl.broker.web.context import WebContext, http_error
from impl.security.tokens import AuthenticationFailed, TokenAuthenticator
from impl.web.http import Request, Response, Router

OPEN_PATHS = ("/metrics",)  # served without credentials, as Pulsar's metrics are by default


def router(ctx: WebContext) -> Router:
    """Every route of the broker's web service."""
    r = Router(translate=http_error)
    admin.install(r, ctx)
    topics.install(r, ctx)
    lookup.install(r, ctx)
    metrics.install(r, ctx)
    view.install(r, ctx)
    return r


def app(ctx: WebContext, authenticator: TokenAuthenticator | None) -> Callable[[Request], Response]:
    """The router, behind token authentication when it is on: `Authorization: Bearer <token>`, else 401."""
    routes = router(ctx)
    if authenticator is None:
        return routes

    def guarded(req: Request) -> Response:
        if req.path in OPEN_PATHS:
            return routes(req)
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Response.error(401, "Authentication required: send Authorization: Bearer <token>")
        try:
            authenticator.authenticate(token.strip())
        except AuthenticationFailed as e:
            return Response.error(401, f"Authentication failed: {e}")
        return routes(req)

    return guarded
