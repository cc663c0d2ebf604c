"""The proxy's connection core (impl/proxy/connection.py), frame by frame: no sockets, no brokers."""

from __future__ import annotations

import pytest

from impl.broker.connection import Close, DoAuthenticate, Reply, command
from impl.protocol import frames
from impl.protocol import pulsar_api_pb2 as api
from impl.proxy import connection as core

T = api.BaseCommand
URL, TLS_URL = "pulsar://127.0.0.1:6651", "pulsar+ssl://127.0.0.1:6652"


def frame(cmd: api.BaseCommand) -> frames.Frame:
    (decoded,) = frames.FrameDecoder().feed(frames.encode(cmd))
    return decoded


def connect(proxy_to: str | None = None, version: int = 21) -> frames.Frame:
    c = api.CommandConnect(client_version="test", protocol_version=version)
    if proxy_to is not None:
        c.proxy_to_broker_url = proxy_to
    return frame(command(T.CONNECT, connect=c))


def received(c: core.ProxyConnection, frame: frames.Frame, now: float) -> list[core.Output]:
    return c.step(core.FrameReceived(frame, now))


def replies(outputs: list[core.Output]) -> list[api.BaseCommand]:
    return [o.command for o in outputs if isinstance(o, Reply)]


def test_a_lookup_connection_is_answered_by_the_proxy_itself() -> None:
    c = core.ProxyConnection()
    (connected,) = replies(received(c, connect(), 0.0))
    assert connected.type == T.CONNECTED and connected.connected.protocol_version == 20  # the lower version
    assert c.state is core.State.LOOKUPS
    lookup = api.CommandLookupTopic(topic="persistent://public/default/t", request_id=7)
    assert received(c, frame(command(T.LOOKUP, lookupTopic=lookup)), 1.0) == [core.DoLookup(7, lookup.topic)]
    (answer,) = [r.lookupTopicResponse for r in replies(c.step(core.LookupDone(7, URL, TLS_URL)))]
    assert answer.response == api.CommandLookupTopicResponse.Connect
    assert answer.proxy_through_service_url and answer.brokerServiceUrl == URL
    metadata = api.CommandPartitionedTopicMetadata(topic="t", request_id=8)
    assert received(c, frame(command(T.PARTITIONED_METADATA, partitionMetadata=metadata)), 1.0) == [
        core.DoPartitions(8, "t")
    ]
    listing = api.CommandGetTopicsOfNamespace(request_id=9, namespace="public/default")
    assert received(c, frame(command(T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=listing)), 1.0) == [
        core.DoTopics(9, "public/default")
    ]
    listing = api.CommandGetTopicsOfNamespace(
        request_id=10, namespace="public/default", mode=api.CommandGetTopicsOfNamespace.ALL
    )
    assert received(c, frame(command(T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=listing)), 1.0) == [
        core.DoTopics(10, "public/default", "ALL")  # the mode goes to the brokers' listing
    ]
    (pong,) = replies(received(c, frame(command(T.PING, ping=api.CommandPing())), 2.0))
    assert pong.type == T.PONG


def test_producers_and_consumers_on_a_lookup_connection_get_an_error_naming_the_command() -> None:
    c = core.ProxyConnection()
    received(c, connect(), 0.0)
    producer = api.CommandProducer(topic="t", producer_id=1, request_id=3)
    (error,) = replies(received(c, frame(command(T.PRODUCER, producer=producer)), 1.0))
    assert error.type == T.ERROR and error.error.request_id == 3 and "PRODUCER" in error.error.message
    assert c.state is core.State.LOOKUPS  # the connection stays usable


def test_a_proxied_connect_goes_to_the_broker_without_the_proxy_field() -> None:
    c = core.ProxyConnection()
    (do,) = received(c, connect("127.0.0.1:6651"), 0.0)
    assert isinstance(do, core.DoConnectBroker) and do.target == "127.0.0.1:6651"
    assert do.connect.type == T.CONNECT and not do.connect.connect.HasField("proxy_to_broker_url")
    assert do.connect.connect.client_version == "test"
    assert c.state is core.State.CONNECTING
    connected = frame(command(T.CONNECTED, connected=api.CommandConnected(server_version="b", protocol_version=20)))
    out = c.step(core.BrokerAnswered(connected))
    assert replies(out)[0].connected.server_version == "b" and isinstance(out[1], core.StartRelay)
    assert c.state is core.State.RELAYING


def test_a_broker_that_refuses_or_cannot_be_reached_closes_the_client() -> None:
    c = core.ProxyConnection()
    received(c, connect("127.0.0.1:1"), 0.0)
    out = c.step(core.BrokerUnreachable("127.0.0.1:1 is not a registered broker"))
    assert replies(out)[0].type == T.ERROR and isinstance(out[-1], Close) and c.state is core.State.CLOSED
    c = core.ProxyConnection()
    received(c, connect("127.0.0.1:2"), 0.0)
    error = frame(command(T.ERROR, error=api.CommandError(request_id=0, error=api.AuthenticationError, message="no")))
    out = c.step(core.BrokerAnswered(error))
    assert replies(out)[0].type == T.ERROR and isinstance(out[-1], Close)


def test_nothing_but_connect_first_and_silence_is_closed() -> None:
    c = core.ProxyConnection()
    (closed,) = received(c, frame(command(T.PING, ping=api.CommandPing())), 0.0)
    assert isinstance(closed, Close) and "before CONNECT" in closed.reason
    c = core.ProxyConnection(keepalive_s=10)
    c.step(core.ConnectionOpened(0.0))
    received(c, connect(), 0.0)
    assert c.step(core.Tick(5.0)) == []
    (ping,) = replies(c.step(core.Tick(10.0)))
    assert ping.type == T.PING
    assert isinstance(c.step(core.Tick(20.0))[0], Close)
    relayed = core.ProxyConnection(keepalive_s=10)
    received(relayed, connect("h:1"), 0.0)
    assert relayed.step(core.Tick(100.0)) == []  # the broker keeps a relayed connection alive, not the proxy


def test_failed_lookups_and_listings_are_answered_to_the_client_with_their_request_id() -> None:
    c = core.ProxyConnection()
    received(c, connect(), 0.0)
    (lookup,) = replies(c.step(core.LookupFailed(4, api.ServiceNotReady, "no broker")))
    failed = lookup.lookupTopicResponse
    assert (failed.request_id, failed.response, failed.error) == (
        4,
        api.CommandLookupTopicResponse.Failed,
        api.ServiceNotReady,
    )
    (metadata,) = replies(c.step(core.PartitionsDone(5, 3)))
    assert (metadata.partitionMetadataResponse.request_id, metadata.partitionMetadataResponse.partitions) == (5, 3)
    (listing,) = replies(c.step(core.TopicsDone(6, ("persistent://public/default/t",))))
    assert list(listing.getTopicsOfNamespaceResponse.topics) == ["persistent://public/default/t"]
    (error,) = replies(c.step(core.TopicsFailed(7, api.AuthorizationError, "no")))
    assert (error.type, error.error.request_id, error.error.error) == (T.ERROR, 7, api.AuthorizationError)


def test_a_connect_waits_for_its_credentials_to_be_checked() -> None:
    c = core.ProxyConnection(authentication=True)
    (check,) = received(c, connect(), 0.0)
    assert isinstance(check, DoAuthenticate) and c.state is core.State.AUTHENTICATING
    (connected,) = replies(c.step(core.Authenticated()))
    assert connected.type == T.CONNECTED and c.state is core.State.LOOKUPS
    refused = core.ProxyConnection(authentication=True)
    received(refused, connect(), 0.0)
    out = refused.step(core.AuthenticationFailed("bad token"))
    assert replies(out)[0].error.error == api.AuthenticationError and isinstance(out[-1], Close)


def test_the_core_refuses_what_is_not_one_of_its_events() -> None:
    with pytest.raises(TypeError):
        core.ProxyConnection().step(core.StartRelay())  # type: ignore[arg-type]


def test_the_handshake_must_complete_in_time_even_with_traffic() -> None:
    c = core.ProxyConnection(keepalive_s=30, handshake_timeout_s=10)
    c.step(core.ConnectionOpened(0.0))
    assert c.step(core.Tick(9.0)) == []
    (close,) = c.step(core.Tick(10.0))
    assert isinstance(close, Close) and "handshake" in close.reason
    c = core.ProxyConnection(keepalive_s=30, handshake_timeout_s=10)
    c.step(core.ConnectionOpened(0.0))
    received(c, connect(), 1.0)  # a lookup connection: the handshake is done
    assert c.state is core.State.LOOKUPS and c.step(core.Tick(11.0)) == []
