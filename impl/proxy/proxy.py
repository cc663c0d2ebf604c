"""A Pulsar proxy: the `pulsar://` listener (impl/proxy/listener.py) and the web port
(impl/proxy/web.py) over one view of the cluster's brokers (impl/proxy/directory.py)."""

from __future__ import annotations

from collections.abc import Callable

from impl.metadata.store import MetadataStore
from impl.proxy.directory import BrokerDirectory
from impl.proxy.listener import ProxyListener
from impl.proxy.web import web_server
from impl.security.settings import Security
from impl.web.server import WebServer


class Proxy:
    """With `security.tls`, a second listener and web port serve TLS (at `tls_ports`; 0 = any free)."""

    def __init__(
        self,
        connect_store: Callable[[], MetadataStore],
        host: str = "127.0.0.1",
        port: int = 0,
        web_port: int = 0,
        security: Security | None = None,
        tls_ports: tuple[int, int] = (0, 0),
    ) -> None:
        security = security or Security()
        self.directory = BrokerDirectory(connect_store)
        refresh = security.auth_refresh_check_s
        self.listener = ProxyListener(self.directory, host, port, security.authenticator, None, refresh)
        self.web = web_server(self.directory, host, web_port)
        self.listener_tls: ProxyListener | None = None
        self.web_tls: WebServer | None = None
        if security.tls is not None:
            context = security.tls.server_context()
            self.listener_tls = ProxyListener(
                self.directory, host, tls_ports[0], security.authenticator, context, refresh
            )
            self.web_tls = web_server(self.directory, host, tls_ports[1], context)

    @property
    def service_url(self) -> str:
        return self.listener.service_url

    @property
    def web_url(self) -> str:
        return self.web.url

    @property
    def tls_urls(self) -> tuple[str, str] | None:
        if self.listener_tls is None or self.web_tls is None:
            return None
        return self.listener_tls.service_url, self.web_tls.url

    def _servers(self) -> list[ProxyListener | WebServer]:
        servers = [self.listener, self.listener_tls, self.web, self.web_tls]
        return [s for s in servers if s is not None]

    def start(self) -> None:
        for server in self._servers():
            server.start()

    def stop(self) -> None:
        for server in self._servers():
            server.stop()
        self.directory.close()
