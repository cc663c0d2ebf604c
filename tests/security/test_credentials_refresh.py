"""Issue 49 item 4, credentials over time: a token that expires on an open connection is re-checked as
Pulsar's broker does (authenticationRefreshCheckSeconds, AUTH_CHALLENGE "refresh", AUTH_RESPONSE), on
the broker and on the proxy's lookup connections; the connection closes without fresh credentials.
The cores frame by frame first, then a real standalone and proxy judged by raw frames and by the
official client (whose AuthenticationToken takes a supplier it calls again on a challenge)."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from impl.broker import connection as conn
from impl.broker.web.admin_client import AdminClient, topic_path
from impl.client import api as client_api
from impl.client import connection as client_core
from impl.protocol import frames
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.session import REFRESH_AUTH_DATA
from impl.proxy import connection as proxy_core
from impl.security import tokens
from tests.broker.pulsar_standalone import Standalone
from tests.processes import start_listening

T = api.BaseCommand
CHECK_S = 1.0  # the servers' refresh check in the process tests
LIFETIME_S = 3  # of the short tokens: 2-3 s left, as a JWT's exp is in whole seconds


def connect_cmd(token: bytes = b"t0", refresh: bool = True, proxy_to: str | None = None) -> api.BaseCommand:
    c = api.CommandConnect(client_version="test", protocol_version=20, auth_method_name="token", auth_data=token)
    c.feature_flags.supports_auth_refresh = refresh
    if proxy_to is not None:
        c.proxy_to_broker_url = proxy_to
    return conn.command(T.CONNECT, connect=c)


def auth_response(token: bytes) -> api.BaseCommand:
    r = api.CommandAuthResponse(client_version="test", protocol_version=20)
    r.response.auth_method_name, r.response.auth_data = "token", token
    return conn.command(T.AUTH_RESPONSE, authResponse=r)


def is_challenge(out: object) -> bool:
    return (
        isinstance(out, conn.Reply)
        and out.command.type == T.AUTH_CHALLENGE
        and out.command.authChallenge.challenge.auth_data == REFRESH_AUTH_DATA
        and out.command.authChallenge.challenge.auth_method_name == "token"
    )


# ---- the broker's core -------------------------------------------------------------------------


def broker_connected(expires_at: float | None, refresh: bool = True) -> conn.ServerConnection:
    core = conn.ServerConnection(max_message_size=1000, authentication=True, auth_refresh_check_s=1.0)
    core.step(conn.ConnectionOpened(0.0))
    (check,) = core.step(conn.FrameReceived(frames.Frame(connect_cmd(refresh=refresh)), 0.0))
    assert check == conn.DoAuthenticate("token", b"t0")
    (connected,) = core.step(conn.Authenticated("alice", expires_at))
    assert isinstance(connected, conn.Reply) and connected.command.type == T.CONNECTED
    return core


def test_the_broker_challenges_expired_credentials_and_goes_on_with_fresh_ones() -> None:
    core = broker_connected(expires_at=4.5)
    for now in (1.0, 2.0, 3.0, 4.0):  # still valid: checked, nothing said
        assert core.step(conn.Tick(now)) == []
    (challenge,) = core.step(conn.Tick(5.0))
    assert is_challenge(challenge)
    assert core.step(conn.Tick(5.5)) == []  # the next check is a whole interval later
    (check,) = core.step(conn.FrameReceived(frames.Frame(auth_response(b"t1")), 5.7))
    assert check == conn.DoAuthenticate("token", b"t1")
    assert core.step(conn.Authenticated("alice", 9.5)) == [] and core.state is conn.State.CONNECTED
    for now in (6.0, 7.0, 8.0, 9.0):  # renewed: no challenge until the new expiry
        assert core.step(conn.Tick(now)) == []
    assert is_challenge(core.step(conn.Tick(10.0))[0])


def test_the_broker_closes_on_refused_fresh_credentials_or_another_role() -> None:
    core = broker_connected(expires_at=1.0)
    assert is_challenge(core.step(conn.Tick(1.0))[0])
    core.step(conn.FrameReceived(frames.Frame(auth_response(b"old")), 1.2))
    error, close = core.step(conn.AuthenticationFailed("the token has expired"))
    assert isinstance(error, conn.Reply) and error.command.error.error == api.AuthenticationError
    assert isinstance(close, conn.Close) and core.state is conn.State.CLOSED
    core = broker_connected(expires_at=1.0)
    core.step(conn.Tick(1.0))
    core.step(conn.FrameReceived(frames.Frame(auth_response(b"mallory's")), 1.2))
    (close,) = core.step(conn.Authenticated("mallory", 100.0))
    assert isinstance(close, conn.Close) and "cannot change" in close.reason and core.role == "alice"


def test_the_broker_closes_when_the_challenge_goes_unanswered_or_cannot_be() -> None:
    core = broker_connected(expires_at=1.0)
    assert is_challenge(core.step(conn.Tick(1.0))[0])
    (close,) = core.step(conn.Tick(2.0))
    assert isinstance(close, conn.Close) and "no AUTH_RESPONSE" in close.reason
    core = broker_connected(expires_at=1.0, refresh=False)  # CONNECT without supports_auth_refresh
    (close,) = core.step(conn.Tick(1.0))
    assert isinstance(close, conn.Close) and "does not support" in close.reason
    core = broker_connected(expires_at=None)  # a token without exp never expires
    assert all(core.step(conn.Tick(float(now))) == [] for now in range(1, 29))
    # Without authentication an AUTH_RESPONSE is a command like any unexpected one: an ERROR, no close.
    plain = conn.ServerConnection(max_message_size=1000)
    plain.step(conn.FrameReceived(frames.Frame(connect_cmd()), 0.0))
    (error,) = plain.step(conn.FrameReceived(frames.Frame(auth_response(b"x")), 0.1))
    assert isinstance(error, conn.Reply) and error.command.type == T.ERROR
    assert plain.step(conn.Authenticated("mallory")) == [] and plain.role == ""


# ---- the proxy's core ----------------------------------------------------------------------------


def test_the_proxy_challenges_its_lookup_connections_and_leaves_relayed_ones_to_the_broker() -> None:
    lookups = proxy_core.ProxyConnection(authentication=True, auth_refresh_check_s=1.0)
    lookups.step(proxy_core.ConnectionOpened(0.0))
    (check,) = lookups.step(proxy_core.FrameReceived(frames.Frame(connect_cmd()), 0.0))
    assert isinstance(check, conn.DoAuthenticate)
    lookups.step(proxy_core.Authenticated("alice", 1.5))
    assert lookups.state is proxy_core.State.LOOKUPS and lookups.step(proxy_core.Tick(1.0)) == []
    assert is_challenge(lookups.step(proxy_core.Tick(2.0))[0])
    (check,) = lookups.step(proxy_core.FrameReceived(frames.Frame(auth_response(b"t1")), 2.1))
    assert check == conn.DoAuthenticate("token", b"t1")
    assert lookups.step(proxy_core.Authenticated("alice", 10.0)) == []
    assert lookups.step(proxy_core.Tick(3.0)) == [] and lookups.state is proxy_core.State.LOOKUPS
    lookups.step(proxy_core.Tick(10.0))
    (close,) = lookups.step(proxy_core.Tick(11.0))  # challenged at 10, unanswered at 11
    assert isinstance(close, conn.Close) and lookups.state is proxy_core.State.CLOSED

    relayed = proxy_core.ProxyConnection(authentication=True, auth_refresh_check_s=1.0)
    relayed.step(proxy_core.ConnectionOpened(0.0))
    relayed.step(proxy_core.FrameReceived(frames.Frame(connect_cmd(proxy_to="127.0.0.1:6650")), 0.0))
    relayed.step(proxy_core.Authenticated("alice", 1.5))
    connected = conn.command(T.CONNECTED, connected=api.CommandConnected(protocol_version=20))
    relayed.step(proxy_core.BrokerAnswered(frames.Frame(connected)))
    assert relayed.state is proxy_core.State.RELAYING
    assert all(relayed.step(proxy_core.Tick(float(now))) == [] for now in range(1, 10))


# ---- the project's client ----------------------------------------------------------------------


def test_the_project_client_announces_refresh_and_answers_a_challenge_with_a_fresh_token() -> None:
    c = client_core.ClientConnection()
    (connect,) = c.step(client_core.Connect("t0"))
    assert isinstance(connect, client_core.Write)
    assert frames.FrameDecoder().feed(connect.data)[0].command.connect.feature_flags.supports_auth_refresh
    connected = conn.command(T.CONNECTED, connected=api.CommandConnected(protocol_version=20))
    c.step(client_core.FrameReceived(frames.Frame(connected)))
    challenge = api.CommandAuthChallenge(challenge=api.AuthData(auth_method_name="token", auth_data=b"refresh"))
    out = c.step(client_core.FrameReceived(frames.Frame(conn.command(T.AUTH_CHALLENGE, authChallenge=challenge))))
    assert out == [client_core.Challenged("token")]
    (answer,) = c.step(client_core.AnswerChallenge("t1"))
    assert isinstance(answer, client_core.Write)
    sent = frames.FrameDecoder().feed(answer.data)[0].command
    assert sent.type == T.AUTH_RESPONSE and sent.authResponse.response.auth_data == b"t1"


# ---- real processes ------------------------------------------------------------------------------


@dataclass
class Secured:
    standalone: Standalone
    proxy_url: str
    secret: bytes

    def token(self, lifetime_s: float | None = LIFETIME_S) -> str:
        return tokens.create_token("app", secret_key=self.secret, expires_in_s=lifetime_s)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("refresh")
    secret = tokens.create_secret_key()
    key = directory / "secret.key"
    key.write_bytes(secret)
    options = (
        "--authentication-enabled", "--token-secret-key", str(key),
        "--authentication-refresh-check-seconds", str(CHECK_S),
    )  # fmt: skip
    standalone = Standalone(directory / "data", *options)
    proxy = None
    try:
        metadata = f"embedded://{(directory / 'data' / 'metadata').resolve()}"
        proxy, _, banner = start_listening(
            ["proxy", "--metadata", metadata, "--port", "0", "--web-port", "0", *options]
        )
        yield Secured(standalone, banner.split("Pulsar clients: ")[1].split(";")[0], secret)
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(20)
        standalone.stop()


class RawConnection:
    """A connection that speaks frames one by one, as no client library lets a test do."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("pulsar://").rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = frames.FrameDecoder()
        self.received: list[frames.Frame] = []

    def send(self, cmd: api.BaseCommand) -> None:
        self.sock.sendall(frames.encode(cmd))

    def next(self, timeout_s: float = 10.0) -> frames.Frame | None:
        """The next frame; None when the server closed the connection."""
        self.sock.settimeout(timeout_s)
        while not self.received:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.received += self.decoder.feed(data)
        return self.received.pop(0)

    def next_but_pings(self, timeout_s: float = 10.0) -> frames.Frame | None:
        while (f := self.next(timeout_s)) is not None and f.command.type == T.PING:
            self.send(conn.command(T.PONG, pong=api.CommandPong()))
        return f

    def close(self) -> None:
        self.sock.close()


@pytest.mark.processes
def test_a_connection_whose_token_expires_is_challenged_and_kept_only_with_a_fresh_token(secured: Secured) -> None:
    raw = RawConnection(secured.standalone.url)
    try:
        raw.send(connect_cmd(secured.token(lifetime_s=2).encode()))
        connected = raw.next()
        assert connected is not None and connected.command.type == T.CONNECTED
        challenge = raw.next_but_pings(timeout_s=5)
        assert challenge is not None and challenge.command.type == T.AUTH_CHALLENGE
        assert challenge.command.authChallenge.challenge.auth_data == REFRESH_AUTH_DATA
        assert challenge.command.authChallenge.challenge.auth_method_name == "token"
        raw.send(auth_response(secured.token(lifetime_s=2).encode()))
        raw.send(conn.command(T.PING, ping=api.CommandPing()))
        pong = raw.next_but_pings()
        assert pong is not None and pong.command.type == T.PONG  # accepted: the connection goes on
        again = raw.next_but_pings(timeout_s=5)  # the fresh token expires in turn
        assert again is not None and again.command.type == T.AUTH_CHALLENGE
        raw.send(auth_response(secured.token(lifetime_s=-5).encode()))  # an expired one is refused
        error = raw.next_but_pings()
        assert error is not None and error.command.type == T.ERROR
        assert error.command.error.error == api.AuthenticationError
        assert raw.next_but_pings() is None  # and the connection closed
    finally:
        raw.close()
    # Unanswered challenges, of the broker and of the proxy on a lookup connection (CONNECT without
    # proxy_to_broker_url: the proxy itself serves it): closed at the next check.
    silent = [RawConnection(secured.standalone.url), RawConnection(secured.proxy_url)]
    try:
        for raw in silent:
            raw.send(connect_cmd(secured.token(lifetime_s=2).encode()))
        for raw in silent:
            assert raw.next().command.type == T.CONNECTED  # type: ignore[union-attr]
        for raw in silent:
            challenge = raw.next_but_pings(timeout_s=5)
            assert challenge is not None and challenge.command.type == T.AUTH_CHALLENGE
            assert challenge.command.authChallenge.challenge.auth_data == REFRESH_AUTH_DATA
        for raw in silent:
            assert raw.next_but_pings(timeout_s=5) is None
    finally:
        for raw in silent:
            raw.close()


class Supplier:
    """What the official client calls for a token: a fresh short-lived one each time."""

    def __init__(self, secured: Secured) -> None:
        self.secured, self.calls = secured, 0
        self.lock = threading.Lock()

    def __call__(self) -> str:
        with self.lock:
            self.calls += 1
        return self.secured.token()


@pytest.mark.processes
def test_the_official_client_keeps_producing_with_a_supplier_and_is_cut_off_without(secured: Secured) -> None:
    """Direct and through the proxy at once, over one window that outlives the first tokens twice."""
    clients, producers, suppliers = [], {}, {}
    try:
        for route, url in (("direct", secured.standalone.url), ("proxy", secured.proxy_url)):
            supplier = Supplier(secured)
            suppliers[route] = supplier
            for kind, auth in (("fresh", supplier), ("fixed", secured.token())):
                client = pulsar.Client(
                    url, authentication=pulsar.AuthenticationToken(auth), operation_timeout_seconds=5
                )
                clients.append(client)
                producers[route, kind] = client.create_producer(
                    f"persistent://public/default/refresh-{route}-{kind}", send_timeout_millis=3000
                )
                producers[route, kind].send(b"first")  # in, well before its token expires
        suppliers["project"] = Supplier(secured)  # the project's own client, directly
        project_client = client_api.Client(secured.standalone.url, token=suppliers["project"])
        clients.append(project_client)
        project = project_client.create_producer("persistent://public/default/refresh-project")
        project_connection = project_client.connection(
            project_client.lookup("persistent://public/default/refresh-project")
        )
        end = time.monotonic() + 2 * LIFETIME_S + 2 * CHECK_S
        while time.monotonic() < end:
            for route in ("direct", "proxy"):
                producers[route, "fresh"].send(b"still allowed")
            project.send(b"still allowed")
            time.sleep(0.5)
        assert suppliers["project"].calls >= 3
        # Refreshed on the same connection: the broker never had to close it.
        assert project_connection.open
        assert (
            project_client.connection(project_client.lookup("persistent://public/default/refresh-project"))
            is project_connection
        )
        results: dict[str, pulsar.Result] = {}
        done = threading.Event()

        def sent(route: str, result: pulsar.Result) -> None:
            results[route] = result
            if len(results) == 2:
                done.set()

        for route in ("direct", "proxy"):
            assert suppliers[route].calls >= 3, route  # CONNECT, then at least one answer per expiry
            producers[route, "fixed"].send_async(b"refused", lambda result, _id, r=route: sent(r, result))
            producers[route, "fresh"].send(b"last")
        assert done.wait(10)
        # Disconnected, then refused on reconnecting: the send times out.
        assert set(results.values()) == {pulsar.Result.Timeout}, results
    finally:
        for client in clients:
            client.close()
    # Counted by the broker: nothing of the fixed-token producers after their first message.
    admin = AdminClient(secured.standalone.web_url, token=secured.token(lifetime_s=60))
    for route in ("direct", "proxy"):
        fixed = admin.call("GET", topic_path(f"persistent://public/default/refresh-{route}-fixed") + "/internalStats")
        assert fixed["numberOfEntries"] == 1, route


def test_the_refresh_check_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="must be > 0"):
        start_listening(
            ["standalone", "--data", str(tmp_path), "--authentication-refresh-check-seconds", "0"],
            stderr=subprocess.PIPE,
        )
