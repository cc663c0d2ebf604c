"""Every route of the broker's web service, and the authentication and authorization in front of them."""

from __future__ import annotations

from collections.abc import Callable

from impl.broker.web import admin, lookup, metrics, non_persistent, permissions, schemas, topics, view
from impl.broker.web.access import OPEN, need_of, refusal
from impl.broker.web.context import WebContext, http_error
from impl.security.authorization import AuthorizationFailed
from impl.security.tokens import AuthenticationFailed, TokenAuthenticator
from impl.web.http import Request, Response, Router


def router(ctx: WebContext) -> Router:
    """Every route of the broker's web service."""
    r = Router(translate=http_error)
    admin.install(r, ctx)
    topics.install(r, ctx)
    non_persistent.install(r, ctx)
    permissions.install(r, ctx)
    schemas.install(r, ctx)
    lookup.install(r, ctx)
    metrics.install(r, ctx)
    view.install(r, ctx)
    return r


def app(ctx: WebContext, authenticator: TokenAuthenticator | None) -> Callable[[Request], Response]:
    """The router, behind token authentication when it is on (`Authorization: Bearer <token>`, else
    401) and behind the authorizer when that is on too (Pulsar's status and sentence for a role without
    the access it needs: 401 or 403, see access.refusal)."""
    routes = router(ctx)
    if authenticator is None:
        return routes

    def guarded(req: Request) -> Response:
        if req.path in OPEN:
            return routes(req)
        try:
            role = authenticator.authenticate_http(req.headers.get("authorization", ""))
        except AuthenticationFailed as e:
            return Response.error(401, str(e))
        need = need_of(req.method, req.path)
        try:
            ctx.service.authorizer.check(
                role, need.access, tenant=need.tenant, namespace=need.namespace, topic=need.topic
            )
        except AuthorizationFailed:
            return Response.error(*refusal(need, role))
        except Exception as e:  # the metadata store could not be read: the router's answer for it
            error = http_error(e)
            if error is None:
                raise
            return Response.error(error.status, error.reason)
        return routes(req)

    return guarded
