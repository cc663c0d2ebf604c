"""Issue 49: a standalone stopped (SIGSTOP) past its metadata session timeout serves writes again.

The stall expires every session the process holds: while it is stopped, a second session on the same
embedded store (a witness, as another process sharing the directory would be) reaps them and deletes
their ephemeral nodes, the bookies' registrations among them. This is the deterministic form of what a
stall did by chance before (which of the process's own heartbeat threads ran first after SIGCONT): the
bookies stayed unregistered for good, `bookies/all` answered [] and every new topic failed with "need 2
writable bookies, have 0", while /brokers/health said ok.

The stated bound: within RECOVERY_S seconds of SIGCONT the health endpoint says ok, every bookie is
registered again (on a new session) and the official client writes to an old and a new topic.
"""

from __future__ import annotations

import os
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pulsar

from impl.metadata import layout
from impl.metadata.embedded import EmbeddedStore
from tests.broker.pulsar_standalone import Standalone
from tests.waiting import wait_for

SESSION_TIMEOUT_S = 2.0
RECOVERY_S = 30.0


def _health(web_url: str) -> int:
    try:
        with urllib.request.urlopen(f"{web_url}/admin/v2/brokers/health", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def test_a_standalone_stopped_past_its_session_timeout_serves_writes_again(tmp_path: Path) -> None:
    data = tmp_path / "standalone"
    s = Standalone(data, "--session-timeout", str(SESSION_TIMEOUT_S), "--shutdown-timeout", "20")
    stopped = False
    try:
        witness = EmbeddedStore(data / "metadata", session_timeout_s=SESSION_TIMEOUT_S)
    except BaseException:
        s.stop()
        raise
    client = pulsar.Client(s.url, operation_timeout_seconds=int(RECOVERY_S))
    try:
        bookies = [b["bookieId"] for b in s.admin.call("GET", "/admin/v2/bookies/all")["bookies"]]
        assert len(bookies) == 3
        owners = {b: witness.exists(layout.bookie_path(b)).ephemeral_owner for b in bookies}  # type: ignore[union-attr]
        producer = client.create_producer("persistent://public/default/before-stall", send_timeout_millis=30_000)
        producer.send(b"before")
        assert _health(s.web_url) == 200

        os.kill(s.proc.pid, signal.SIGSTOP)
        stopped = True
        # Past the timeout the witness reaps the stopped process's sessions: the registrations go.
        wait_for(
            lambda: all(witness.exists(layout.bookie_path(b)) is None for b in bookies),
            "the stopped standalone's sessions to expire",
            30,
        )
        os.kill(s.proc.pid, signal.SIGCONT)
        stopped = False

        wait_for(lambda: _health(s.web_url) == 200, "the health endpoint to say ok again", RECOVERY_S)
        registered = {b: witness.exists(layout.bookie_path(b)) for b in bookies}
        assert all(stat is not None for stat in registered.values()), registered
        assert all(registered[b].ephemeral_owner != owners[b] for b in bookies)  # type: ignore[union-attr]
        producer.send(b"after")  # the old topic, reloaded on the broker's new session
        fresh = client.create_producer("persistent://public/default/after-stall", send_timeout_millis=30_000)
        fresh.send(b"new")  # a new topic: a new ledger on the re-registered bookies
        consumer = client.subscribe(
            "persistent://public/default/before-stall",
            "stall-check",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got = [consumer.receive(timeout_millis=20_000).data() for _ in range(2)]
        assert got == [b"before", b"after"]
    finally:
        if stopped:
            os.kill(s.proc.pid, signal.SIGCONT)
        client.close()
        witness.close()
        s.stop()
