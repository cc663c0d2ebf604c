"""The broker's web service: Pulsar's admin REST API v2, HTTP lookup, /metrics and the cluster view."""

from __future__ import annotations

from impl.broker.web import admin, lookup, metrics, topics, view
from impl.broker.web.context import WebContext, http_error
from impl.web.http import Router


def router(ctx: WebContext) -> Router:
    """Every route of the broker's web service."""
    r = Router(translate=http_error)
    admin.install(r, ctx)
    topics.install(r, ctx)
    lookup.install(r, ctx)
    metrics.install(r, ctx)
    view.install(r, ctx)
    return r
