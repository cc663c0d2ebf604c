"""HTTP lookup, as Pulsar's `/lookup/v2/topic/...`: which broker serves a topic, so a client given an
http:// service URL finds the broker to connect to (partitions and a namespace's topics are the admin
API's own calls; a topic without a schema answers 404, as Pulsar does)."""

from __future__ import annotations

from impl.broker import namespaces
from impl.broker.web.context import WebContext, redirect_to_owner
from impl.metadata.naming import NON_PERSISTENT, PERSISTENT, TopicName
from impl.web.http import HttpError, Request, Response, Router


def install(router: Router, ctx: WebContext) -> None:
    def lookup(req: Request, domain: str, tenant: str, namespace: str, topic: str) -> Response:
        if domain not in (PERSISTENT, NON_PERSISTENT):
            raise HttpError(400, f"the domain must be persistent or non-persistent, not {domain!r}")
        name = TopicName.parse(f"{domain}://{tenant}/{namespace}/{topic}")
        namespaces.get_policies(ctx.configuration_store, name.namespace_name)  # 404 for a namespace that does not exist
        found = ctx.service.ownership.lookup(name, req.flag("authoritative"))
        if found.kind == "redirect":
            return redirect_to_owner(ctx, req, name, found.broker_address, found.authoritative)
        return Response.json(
            {
                "brokerUrl": ctx.service_url,
                "brokerUrlTls": ctx.service_url_tls,
                "httpUrl": ctx.web_url,
                "httpUrlTls": ctx.web_url_tls,
                "nativeUrl": ctx.service_url,
            }
        )

    router.add("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", lookup)
