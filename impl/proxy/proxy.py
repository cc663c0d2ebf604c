"""A Pulsar proxy: the `pulsar://` listener (impl/proxy/listener.py) and the web port
(impl/proxy/web.py) over one view of the cluster's brokers (impl/proxy/directory.py)."""

from __future__ import annotations

from collections.abc import Callable

from impl.metadata.store import MetadataStore
from impl.proxy.directory import BrokerDirectory
from impl.proxy.listener import ProxyListener
from impl.proxy.web import web_server


class Proxy:
    def __init__(
        self, connect_store: Callable[[], MetadataStore], host: str = "127.0.0.1", port: int = 0, web_port: int = 0
    ) -> None:
        self.directory = BrokerDirectory(connect_store)
        self.listener = ProxyListener(self.directory, host, port)
        self.web = web_server(self.directory, host, web_port)

    @property
    def service_url(self) -> str:
        return self.listener.service_url

    @property
    def web_url(self) -> str:
        return self.web.url

    def start(self) -> None:
        self.listener.start()
        self.web.start()

    def stop(self) -> None:
        self.listener.stop()
        self.web.stop()
        self.directory.close()
