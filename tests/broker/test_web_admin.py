"""The broker's web service over real HTTP against a `pulsar-ref standalone` process: Pulsar's admin
REST API v2, HTTP lookup, the official client with an http:// service URL, `pulsar-ref admin`, and
bad input answered 4xx with a JSON reason while the broker keeps serving."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.bookie.core import DEFAULT_MAX_ENTRY_SIZE
from impl.broker.web.admin_client import AdminClient, topic_path
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import ROOT, Standalone, running_standalone

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


def raw(s: Standalone, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    """One request, redirects not followed: (status, headers, decoded JSON body or text)."""
    parts = urlsplit(s.web_url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=20)
    connection.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    headers = {k.lower(): v for k, v in response.getheaders()}
    if headers.get("content-type", "").startswith("application/json") and data:
        return response.status, headers, json.loads(data)
    return response.status, headers, data.decode()


def status_of(call: Any) -> int:
    try:
        call()
    except HttpError as e:
        return e.status
    return 200


def test_clusters_tenants_and_namespaces(standalone: Standalone) -> None:
    admin = standalone.admin
    assert admin.call("GET", "/admin/v2/clusters") == ["standalone"]
    cluster = admin.call("GET", "/admin/v2/clusters/standalone")
    assert cluster["serviceUrl"] == standalone.web_url and cluster["brokerServiceUrl"] == standalone.url
    assert status_of(lambda: admin.call("GET", "/admin/v2/clusters/elsewhere")) == 404

    assert "public" in admin.call("GET", "/admin/v2/tenants")
    admin.call("PUT", "/admin/v2/tenants/acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    assert admin.call("GET", "/admin/v2/tenants/acme") == {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    assert status_of(lambda: admin.call("PUT", "/admin/v2/tenants/acme", {})) == 409
    assert status_of(lambda: admin.call("GET", "/admin/v2/tenants/nobody")) == 404
    bad_cluster = {"allowedClusters": ["mars"]}
    assert status_of(lambda: admin.call("PUT", "/admin/v2/tenants/other", bad_cluster)) == 412

    admin.call("PUT", "/admin/v2/namespaces/acme/ns", {"bundles": {"numBundles": 2}})
    assert admin.call("GET", "/admin/v2/namespaces/acme") == ["acme/ns"]
    policies = admin.call("GET", "/admin/v2/namespaces/acme/ns")
    assert policies["bundles"]["numBundles"] == 2 and len(policies["bundles"]["boundaries"]) == 3
    assert status_of(lambda: admin.call("PUT", "/admin/v2/namespaces/acme/ns")) == 409
    assert status_of(lambda: admin.call("PUT", "/admin/v2/namespaces/nobody/ns")) == 404
    assert status_of(lambda: admin.call("DELETE", "/admin/v2/tenants/acme")) == 409  # it has a namespace

    admin.call("POST", "/admin/v2/namespaces/acme/ns/deduplication", False)
    assert admin.call("GET", "/admin/v2/namespaces/acme/ns/deduplication") is False
    admin.call("POST", "/admin/v2/namespaces/acme/ns/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 5})
    assert admin.call("GET", "/admin/v2/namespaces/acme/ns/retention") == {
        "retentionTimeInMinutes": 60,
        "retentionSizeInMB": 5,
    }
    retention = {"retentionTimeInMinutes": -5}
    assert status_of(lambda: admin.call("POST", "/admin/v2/namespaces/acme/ns/retention", retention)) == 412

    admin.call("PUT", topic_path("acme/ns/keep"))
    assert admin.call("GET", "/admin/v2/namespaces/acme/ns/topics") == ["persistent://acme/ns/keep"]
    assert status_of(lambda: admin.call("DELETE", "/admin/v2/namespaces/acme/ns")) == 409  # not empty
    admin.call("DELETE", topic_path("acme/ns/keep"))
    admin.call("DELETE", "/admin/v2/namespaces/acme/ns")
    admin.call("DELETE", "/admin/v2/tenants/acme")
    assert "acme" not in admin.call("GET", "/admin/v2/tenants")


def test_topics_stats_subscriptions_and_cursor_reset(standalone: Standalone) -> None:
    admin, topic = standalone.admin, "persistent://public/default/web-stats"
    path = topic_path(topic)
    admin.call("PUT", path)
    assert status_of(lambda: admin.call("PUT", path)) == 409
    assert topic in admin.call("GET", "/admin/v2/persistent/public/default")
    assert admin.call("GET", path + "/partitions") == {"partitions": 0}
    assert status_of(lambda: admin.call("GET", topic_path("never-made") + "/stats")) == 404
    assert status_of(lambda: admin.call("GET", topic_path("never-made") + "/partitions")) == 404
    assert admin.call("GET", topic_path("never-made") + "/partitions?checkAllowAutoCreation=true") == {"partitions": 0}

    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        for i in range(10):
            producer.send(b"m%d" % i)
        middle = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(10, 15):
            producer.send(b"m%d" % i)
        received = [consumer.receive(10_000) for _ in range(15)]
        for m in received[:5]:
            consumer.acknowledge(m)

        stats = admin.call("GET", path + "/stats")
        assert stats["msgInCounter"] == 15 and stats["bytesInCounter"] == stats["storageSize"]  # entries as stored
        assert stats["msgOutCounter"] >= 15 and stats["storageSize"] > 0
        assert [p["producerName"] for p in stats["publishers"]] == ["p1"]
        assert stats["subscriptions"]["sub"]["type"] == "Exclusive"
        assert stats["subscriptions"]["sub"]["consumers"]

        internal = admin.call("GET", path + "/internalStats")
        assert internal["numberOfEntries"] == 15 and internal["state"] == "LedgerOpened"
        assert sum(ledger["entries"] for ledger in internal["ledgers"]) == 15
        assert set(internal["cursors"]) == {"sub"}
        last = admin.call("GET", path + "/lastMessageId")
        assert f"{last['ledgerId']}:{last['entryId']}" == internal["lastConfirmedEntry"]
        assert admin.call("GET", path + "/subscriptions") == ["sub"]

        # A subscription with a connected consumer is not deleted (412); a reset by time moves it back.
        assert status_of(lambda: admin.call("DELETE", path + "/subscription/sub")) == 412
        assert status_of(lambda: admin.call("DELETE", path + "/subscription/none")) == 404
        admin.call("POST", path + f"/subscription/sub/resetcursor/{middle}")
        again = [consumer.receive(10_000).data() for _ in range(5)]
        assert again == [b"m%d" % i for i in range(10, 15)]
        assert status_of(lambda: admin.call("DELETE", path)) == 412  # producers and consumers are connected
        consumer.close()
        producer.close()
    finally:
        client.close()
    admin.call("DELETE", path + "/subscription/sub")
    assert admin.call("GET", path + "/subscriptions") == []
    admin.call("PUT", path + "/unload")
    assert admin.call("GET", path + "/internalStats")["numberOfEntries"] == 15  # reloaded where it was
    admin.call("DELETE", path)
    assert status_of(lambda: admin.call("GET", path + "/stats")) == 404


def test_partitioned_topics(standalone: Standalone) -> None:
    admin, base = standalone.admin, "persistent://public/default/web-parts"
    path = topic_path(base)
    assert status_of(lambda: admin.call("PUT", path + "/partitions", 0)) == 406
    admin.call("PUT", path + "/partitions", 3)
    assert status_of(lambda: admin.call("PUT", path + "/partitions", 3)) == 409
    assert admin.call("GET", path + "/partitions") == {"partitions": 3}
    assert base in admin.call("GET", "/admin/v2/persistent/public/default/partitioned")
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        producer = client.create_producer(base, batching_enabled=False)
        for i in range(30):
            producer.send(b"%d" % i, partition_key=f"k{i}")
        producer.close()
    finally:
        client.close()
    stats = admin.call("GET", path + "/partitioned-stats")
    assert stats["metadata"] == {"partitions": 3} and stats["msgInCounter"] == 30
    assert set(stats["partitions"]) == {f"{base}-partition-{i}" for i in range(3)}
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 30
    assert "partitions" not in admin.call("GET", path + "/partitioned-stats?perPartition=false")
    admin.call("DELETE", path + "/partitions")
    assert status_of(lambda: admin.call("GET", path + "/partitions")) == 404
    assert not [t for t in admin.call("GET", "/admin/v2/persistent/public/default") if t.startswith(base)]


def test_brokers_bookies_and_lookup(standalone: Standalone) -> None:
    admin = standalone.admin
    web_address = standalone.web_url.removeprefix("http://")
    assert admin.call("GET", "/admin/v2/brokers/standalone") == [web_address]
    assert admin.call("GET", "/admin/v2/brokers/leaderBroker")["serviceUrl"] == standalone.web_url
    assert admin.call("GET", "/admin/v2/brokers/health", raw=True) == "ok"
    bookies = admin.call("GET", "/admin/v2/bookies/all")["bookies"]
    assert len(bookies) == 3 and {b["state"] for b in bookies} == {"rw"}
    assert {b["nettyMaxFrameSizeBytes"] for b in bookies} == {DEFAULT_MAX_ENTRY_SIZE}, bookies  # as published
    found = admin.call("GET", "/lookup/v2/topic/persistent/public/default/looked-up")
    assert found["brokerUrl"] == standalone.url and found["httpUrl"] == standalone.web_url
    assert status_of(lambda: admin.call("GET", "/lookup/v2/topic/persistent/public/none/t")) == 404
    assert status_of(lambda: admin.call("GET", "/admin/v2/schemas/public/default/t/schema")) == 404


def test_the_official_client_works_with_an_http_service_url(standalone: Standalone) -> None:
    client = pulsar.Client(standalone.web_url, operation_timeout_seconds=20)
    try:
        topic = "persistent://public/default/over-http"
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(b"h%d" % i)
        assert [consumer.receive(10_000).data() for _ in range(5)] == [b"h%d" % i for i in range(5)]
        standalone.admin.create_partitioned_topic("over-http-parts", 2)
        partitioned = client.create_producer("persistent://public/default/over-http-parts")
        partitioned.send(b"x")
        assert sorted(client.get_topic_partitions("persistent://public/default/over-http-parts")) == [
            f"persistent://public/default/over-http-parts-partition-{i}" for i in range(2)
        ]
        pattern = client.subscribe(
            "persistent://public/default/over-http-p.*", "pattern", pattern_auto_discovery_period=1
        )
        pattern.close()
    finally:
        client.close()


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/admin/v2/nowhere", None, 404),
        ("PATCH", "/admin/v2/tenants", None, 405),
        ("PUT", "/admin/v2/tenants/bad%20name", b"{}", 412),
        ("PUT", "/admin/v2/tenants/x", b"{not json", 400),
        ("PUT", "/admin/v2/tenants/x", b'{"allowedClusters": "standalone"}', 400),
        ("PUT", "/admin/v2/tenants/x", b"[1, 2]", 400),
        ("PUT", "/admin/v2/namespaces/public/n", b'{"bundles": {"numBundles": "four"}}', 400),
        ("PUT", "/admin/v2/namespaces/public/n2", b'{"bundles": {"numBundles": 0}}', 412),
        ("POST", "/admin/v2/namespaces/public/default/deduplication", b'"yes"', 400),
        ("PUT", "/admin/v2/persistent/public/default/t/partitions", b'"3"', 400),
        ("GET", "/admin/v2/tenants/..%2F..%2Fetc", None, 400),
        ("GET", "/admin/v2/tenants/%2e%2e", None, 400),
        ("GET", "/admin/v2/persistent/public/default/a%00b/stats", None, 400),
        ("POST", "/admin/v2/persistent/public/default/t/subscription/s/resetcursor/yesterday", None, 400),
        ("GET", "/lookup/v2/topic/persistent/public/default/t?authoritative=maybe", None, 400),
        ("GET", "/lookup/v2/topic/elsewhere/public/default/t", None, 400),
        ("PUT", "/admin/v2/tenants/x", b"[" * 200_000, 400),  # issue 49: was a 500 (RecursionError)
        ("GET", "/view/ledger/" + "9" * 30, None, 400),  # issue 49: was a 500 (beyond 64 bits)
        ("GET", "/view/ledger/%C2%B2", None, 400),  # "²": a digit to str.isdigit, not to int()
    ],
)
def test_bad_requests_get_a_4xx_with_a_json_reason(
    standalone: Standalone, method: str, path: str, body: bytes | None, status: int
) -> None:
    got, headers, answer = raw(standalone, method, path, body)
    assert got == status, answer
    assert headers["content-type"].startswith("application/json") and answer["reason"], answer
    assert raw(standalone, "GET", "/admin/v2/brokers/health")[0] == 200  # still serving


def test_oversized_bodies_and_garbage_are_refused_and_the_broker_keeps_serving(standalone: Standalone) -> None:
    parts = urlsplit(standalone.web_url)
    # Refused on the declared length, before the body is read (the client need not send it all).
    head = b"PUT /admin/v2/tenants/big HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(head + b"[" + b"1," * 1000)
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413") and b"is over" in reply, reply
    # A chunked body has no declared length: refused once what arrived passes the limit.
    chunk = b"1," * 300_000
    chunked = b"PUT /admin/v2/tenants/big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(chunked)
        try:
            for _ in range(4):
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        except OSError:
            pass  # the server answered and closed while we were still sending: what is tested
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413"), reply
    for garbage in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\n" + b"X: " + b"y" * 20_000 + b"\r\n\r\n"):
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
            s.sendall(garbage)
            reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 4") and b'"reason"' in reply, reply
    assert raw(standalone, "GET", "/admin/v2/brokers/health")[0] == 200


def test_pulsar_ref_admin_uses_the_rest_api(standalone: Standalone) -> None:
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pulsar_ref.cli", "admin", "--admin-url", standalone.web_url, *args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert admin("tenants", "create", "cli-tenant").returncode == 0
    assert admin("namespaces", "create", "cli-tenant/ns", "--bundles", "2").returncode == 0
    assert json.loads(admin("namespaces", "list", "cli-tenant").stdout) == ["cli-tenant/ns"]
    assert admin("topics", "create", "cli-tenant/ns/t").returncode == 0
    internal = admin("topics", "internal-stats", "cli-tenant/ns/t")
    assert internal.returncode == 0 and json.loads(internal.stdout)["numberOfEntries"] == 0
    assert admin("topics", "unload", "cli-tenant/ns/t").returncode == 0
    refused = admin("namespaces", "delete", "cli-tenant/ns")
    assert refused.returncode == 2 and "(409)" in refused.stderr and "still has topics" in refused.stderr
    assert admin("topics", "delete", "cli-tenant/ns/t").returncode == 0
    assert admin("namespaces", "delete", "cli-tenant/ns").returncode == 0
    assert admin("tenants", "delete", "cli-tenant").returncode == 0
    assert admin("brokers", "healthcheck").stdout.strip() == "ok"
    bad = admin("topics", "stats", "persistent://public/default/a/b")
    assert bad.returncode == 2 and "error" in bad.stderr
    down = subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", "admin", "--admin-url", "http://127.0.0.1:1", "tenants", "list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 2 and "cannot reach" in down.stderr


def test_admin_client_tries_each_broker_of_a_multi_host_url(standalone: Standalone) -> None:
    both = AdminClient("http://127.0.0.1:1," + standalone.web_url.removeprefix("http://"))
    assert "public" in both.call("GET", "/admin/v2/tenants")
    with pytest.raises(HttpError):
        AdminClient("pulsar://127.0.0.1:6650")


def test_metrics_of_the_broker_and_its_bookies_parse_as_prometheus_text(standalone: Standalone) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    topic = "persistent://public/default/metered"
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(12):
            producer.send(b"%d" % i)
    finally:
        client.close()

    def families(url: str) -> dict[str, Any]:
        status, headers, text = raw_url(url + "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        return {f.name: f for f in text_string_to_metric_families(text)}

    broker = families(standalone.web_url)
    mine = {"cluster": "standalone", "namespace": "public/default", "topic": topic}
    published = [s for s in broker["pulsar_in_messages_total"].samples if s.labels == mine]
    assert [s.value for s in published] == [12.0]
    assert [s.value for s in broker["pulsar_producers_count"].samples if s.labels == mine] == [0.0]  # closed
    timed = {s.name: s.value for s in broker["pulsar_broker_publish_latency"].samples if "le" not in s.labels}
    assert timed["pulsar_broker_publish_latency_count"] >= 12 and timed["pulsar_broker_publish_latency_sum"] > 0
    bookies = standalone.admin.call("GET", "/admin/v2/bookies/all")["bookies"]
    for bookie in bookies:
        metrics = families(bookie["httpUrl"])
        assert [s.value for s in metrics["bookie_SERVER_STATUS"].samples] == [1.0]
        assert [s for s in metrics["bookkeeper_server_ADD_ENTRY_REQUEST"].samples if s.name.endswith("_count")]


def raw_url(url: str) -> tuple[int, dict[str, str], str]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=20)
    connection.request("GET", parts.path)
    response = connection.getresponse()
    data = response.read().decode()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def test_a_namespace_retention_policy_keeps_consumed_ledgers_that_are_otherwise_trimmed(standalone: Standalone) -> None:
    admin = standalone.admin

    def backlog(topic: str) -> int:
        """The subscription's backlog (1 while it is not loaded again after an unload)."""
        subscriptions = admin.call("GET", topic_path(topic) + "/stats")["subscriptions"]
        return int(subscriptions["s"]["msgBacklog"]) if "s" in subscriptions else 1

    admin.call("PUT", "/admin/v2/namespaces/public/kept")
    admin.call(
        "POST", "/admin/v2/namespaces/public/kept/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    )
    topics = {"kept": "persistent://public/kept/t", "trimmed": "persistent://public/default/retention-none"}
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        for topic in topics.values():
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            for round_ in range(3):  # three ledgers: each unload closes one, the next load opens another
                producer = client.create_producer(topic, batching_enabled=False)
                for i in range(3):
                    producer.send(b"%d-%d" % (round_, i))
                producer.close()
                admin.call("PUT", topic_path(topic) + "/unload")
            # The last unload closed the consumer: an ack racing with that close is dropped (as Pulsar
            # drops an ack for a consumer it closed) and the client does not send it again. A consumer
            # subscribed after the unloads acknowledges the newest message: everything is consumed.
            consumer.close()
            consumer = client.subscribe(topic, "s")
            last = consumer.receive(10_000)
            while last.data() != b"2-2":
                last = consumer.receive(10_000)
            consumer.acknowledge_cumulative(last)
            deadline = time.monotonic() + 20
            while backlog(topic):
                assert time.monotonic() < deadline, f"the cumulative ack on {topic} never reached the broker"
                time.sleep(0.1)
            consumer.close()
    finally:
        client.close()

    def ledgers(topic: str) -> int:
        return len(admin.call("GET", topic_path(topic) + "/internalStats")["ledgers"])

    deadline = time.monotonic() + 40  # trimming runs after acknowledgements and on the broker's 10 s tick
    while ledgers(topics["trimmed"]) > 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ledgers(topics["trimmed"]) == 1  # every consumed ledger went; the open one stays
    assert ledgers(topics["kept"]) >= 4  # unlimited retention: all three consumed ledgers are still there


def test_a_changed_deduplication_policy_applies_to_a_loaded_topic_at_once(standalone: Standalone) -> None:
    admin = standalone.admin
    admin.call("PUT", "/admin/v2/namespaces/public/live-policies")
    admin.call("POST", "/admin/v2/namespaces/public/live-policies/deduplication", True)  # off by default
    topic = "persistent://public/live-policies/t"
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)

    def entries() -> int:
        return int(admin.call("GET", topic_path(topic) + "/internalStats")["numberOfEntries"])

    try:
        producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
        for sequence in (0, 1, 1):  # the repeated sequence id is a duplicate: dropped
            producer.send(b"%d" % sequence, sequence_id=sequence)
        assert entries() == 2
        admin.call("POST", "/admin/v2/namespaces/public/live-policies/deduplication", False)
        deadline = time.monotonic() + 20
        while entries() < 3 and time.monotonic() < deadline:  # applied by a watch on the policies
            producer.send(b"again", sequence_id=1)
            time.sleep(0.2)
        assert entries() >= 3  # a resent sequence id is written now, on the same loaded topic
        assert admin.call("GET", topic_path(topic) + "/stats")["deduplicationStatus"] == "Disabled"
    finally:
        client.close()


_SEGMENT = st.one_of(
    st.sampled_from(["public", "default", "t", "s", "0", "-1", "99999999999999999999", "..", "%", "partitions"]),
    st.text(max_size=12),
)


@given(
    st.sampled_from(["GET", "PUT", "POST", "DELETE"]),
    st.sampled_from(
        [
            "/admin/v2/tenants",
            "/admin/v2/namespaces",
            "/admin/v2/persistent",
            "/admin/v2/clusters",
            "/admin/v2/brokers",
            "/admin/v2/bookies",
            "/lookup/v2/topic/persistent",
            "/view/ledger",
            "/view/topic",
            "/view",
        ]
    ),  # fmt: skip
    st.lists(_SEGMENT, max_size=5),
    st.one_of(st.none(), st.binary(max_size=64), st.sampled_from([b"[" * 5000, b'{"a":', b"null", b"{}"])),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzzed_rest_requests_never_get_a_500(
    standalone: Standalone, method: str, prefix: str, segments: list[str], body: bytes | None
) -> None:
    """Issue 49 item 8: every REST path answers bad input with a 4xx and a JSON reason, never a 500."""
    if method == "DELETE" and any(s in ("public", "default") for s in segments):
        return  # the module's other tests use public/default
    path = prefix + "".join("/" + quote(s, safe="") for s in segments)
    got, headers, answer = raw(standalone, method, path, body)
    assert got < 500, (method, path, body, answer)
    if got >= 400:
        assert headers["content-type"].startswith("application/json") and answer["reason"], answer
