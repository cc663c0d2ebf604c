"""What the web service needs of its broker, and how broker errors become HTTP answers."""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlencode

from impl.broker import namespaces
from impl.broker.errors import (
    BrokerError,
    ConsumerBusyError,
    NamespaceNotInCluster,
    NotAllowed,
    NotEmptyError,
    NotOwner,
    ReservedName,
    ServiceNotReady,
    TopicNotFound,
)
from impl.broker.service import BrokerService
from impl.metadata.brokers import BrokerLoad
from impl.metadata.naming import InvalidNamespaceName, InvalidTopicName
from impl.metadata.store import ConnectionLoss, MetadataStore, SessionExpired
from impl.web.http import HttpError, Request, Response


class WebContext(Protocol):
    """A broker as its web service sees it (impl/broker/broker.py's Broker is one)."""

    cluster: str
    service: BrokerService

    @property
    def store(self) -> MetadataStore:
        """The cluster's own metadata store: ledgers, bookies, brokers, ownership, managed ledgers."""
        ...

    @property
    def configuration_store(self) -> MetadataStore:
        """The instance's configuration store: the /admin tree (clusters, tenants, namespaces)."""
        ...

    @property
    def web_url(self) -> str: ...

    @property
    def service_url(self) -> str: ...

    @property
    def web_url_tls(self) -> str: ...

    @property
    def service_url_tls(self) -> str: ...

    def live_brokers(self) -> dict[str, BrokerLoad]: ...

    def leader(self) -> str | None: ...

    def unhealthy(self) -> str | None:
        """Why writes cannot succeed now (no live session, too few writable bookies), or None."""
        ...

    def internal_headers(self) -> dict[str, str]:
        """Headers of the broker's own calls to web services (credentials when authentication is on)."""
        ...


def redirect_to_owner(ctx: WebContext, req: Request, what: object, owner: str, authoritative: bool) -> Response:
    """The 307 that sends a request to the broker that owns its topic, over https when it came so."""
    load = ctx.live_brokers().get(owner)
    url = "" if load is None else (load.web_url_tls if req.secure else load.web_url)
    if not url:
        raise HttpError(503, f"the owner of {what}, {owner}, has no registered web service URL; retry")
    query = dict(req.query) | {"authoritative": "true" if authoritative else "false"}
    return Response.redirect(f"{url}{req.path}?{urlencode(query)}")


# Pulsar's status for each kind of failure (its RestException codes).
_STATUS: list[tuple[type[Exception], int]] = [
    (namespaces.TenantNotFound, 404),
    (namespaces.NamespaceNotFound, 404),
    (namespaces.PartitionedTopicNotFound, 404),
    (namespaces.ClusterNotFound, 404),
    (namespaces.InvalidClusterData, 400),
    (namespaces.ClusterNotAllowed, 403),
    (namespaces.ClusterInUse, 412),
    (TopicNotFound, 404),
    (NamespaceNotInCluster, 412),
    (namespaces.AlreadyExists, 409),
    (namespaces.NotEmpty, 409),
    (NotEmptyError, 412),
    (ConsumerBusyError, 412),
    (namespaces.InvalidPolicies, 412),
    (InvalidNamespaceName, 412),
    (InvalidTopicName, 412),
    (ReservedName, 412),
    (NotAllowed, 405),
    (NotOwner, 503),
    (ServiceNotReady, 503),
    (SessionExpired, 503),
    (ConnectionLoss, 503),
]


def http_error(e: Exception) -> HttpError | None:
    """The HTTP answer for an exception a handler let through; None for one that is a bug (500)."""
    for kind, status in _STATUS:
        if isinstance(e, kind):
            retry = "; retry" if status == 503 else ""
            return HttpError(status, f"{e}{retry}")
    if isinstance(e, BrokerError):
        return HttpError(500, str(e))
    return None
