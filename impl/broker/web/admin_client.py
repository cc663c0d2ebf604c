"""A client of the admin REST API v2 (of pulsar-ref or of any Pulsar service): `pulsar-ref admin`,
the workload and the tests call it. The URL may name several brokers
(`http://127.0.0.1:8080,127.0.0.1:8081`): each is tried in turn until one answers."""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import quote

from impl.metadata.naming import TopicName
from impl.web import client
from impl.web.http import HttpError


def web_urls(admin_url: str) -> list[str]:
    """The brokers an `http[s]://host:port[,host:port...]` URL names, each as http[s]://host:port."""
    scheme, sep, rest = admin_url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise HttpError(400, f"{admin_url!r} is not an admin URL: give http[s]://HOST:PORT[,HOST:PORT...]")
    hosts = [h.strip().rstrip("/") for h in rest.split(",") if h.strip()]
    if not hosts:
        raise HttpError(400, f"{admin_url!r} names no broker")
    return [f"{scheme}://{h}" for h in hosts]


def topic_path(topic: str) -> str:
    """`/admin/v2/persistent/tenant/namespace/local` for any accepted spelling of a topic name."""
    name = TopicName.parse(topic)
    return f"/admin/v2/{name.domain}/{name.tenant}/{name.namespace_portion}/{quote(name.local_name, safe='')}"


class AdminClient:
    def __init__(
        self, admin_url: str, timeout_s: float = 30.0, token: str | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.urls = web_urls(admin_url)
        self.timeout_s = timeout_s
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.tls = tls  # how https:// brokers are checked (default: the system's CAs)

    def call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        """The answer of the first broker that answers (redirects followed); HttpError otherwise."""
        unreachable: client.Unreachable | None = None
        for url in self.urls:
            try:
                return client.call(
                    method, url + path, body, self.timeout_s, raw=raw, headers=self.headers, tls=self.tls
                )
            except client.Unreachable as e:
                unreachable = e
        assert unreachable is not None
        raise unreachable

    def message(self, path: str) -> tuple[dict[str, str], bytes]:
        """A GET answered with a message (examinemessage): its headers (names in lower case) and payload."""
        unreachable: client.Unreachable | None = None
        for url in self.urls:
            try:
                status, headers, content = client.exchange(
                    "GET", url + path, None, self.timeout_s, self.headers, self.tls
                )
            except client.Unreachable as e:
                unreachable = e
                continue
            if status >= 400:
                raise HttpError(status, client.reason_of(content) or f"HTTP {status} from GET {url + path}")
            return headers, content
        assert unreachable is not None
        raise unreachable

    def create_partitioned_topic(self, topic: str, partitions: int, exist_ok: bool = False) -> None:
        try:
            self.call("PUT", topic_path(topic) + "/partitions", partitions)
        except HttpError as e:
            if not (exist_ok and e.status == 409):
                raise
