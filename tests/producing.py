"""A producer that keeps sending on a thread of its own while a test breaks things, and remembers
what was acknowledged (what must never be lost); `drain`, what a consumer gets until it is quiet; and
`receive_all`, the messages a test knows it sent and any more that follow at once."""

from __future__ import annotations

import threading
import time

import pulsar


class Producing:
    """Sends b"0", b"1", ... through `producer` until `stop`; `acked` holds the numbers acknowledged."""

    def __init__(self, producer: pulsar.Producer) -> None:
        self.producer = producer
        self.acked: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producing", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.producer.send(b"%d" % i)
                self.acked.append(i)
            except pulsar.PulsarException:
                pass  # not acknowledged: it may or may not be on the topic
            i += 1

    def progress(self, more: int, within_s: float, what: str = "the producer stalled") -> None:
        """Wait until `more` further messages are acknowledged; fail after `within_s`."""
        target, deadline = len(self.acked) + more, time.monotonic() + within_s
        while len(self.acked) < target and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.acked) >= target, f"{what} at {len(self.acked)} acknowledged messages"

    def stop(self, timeout_s: float = 70) -> None:
        self._stop.set()
        self._thread.join(timeout_s)


def drain(consumer: pulsar.Consumer, wait_ms: int = 1000) -> list[pulsar.Message]:
    """Everything the consumer gets until it has been quiet for `wait_ms`, acknowledged."""
    return receive_all(consumer, 0, quiet_ms=wait_ms)


def receive_all(
    consumer: pulsar.Consumer, count: int, quiet_ms: int = 300, within_ms: int = 10_000
) -> list[pulsar.Message]:
    """The `count` messages a test sent (each within `within_ms`), acknowledged, then any that follow within
    `quiet_ms`: a duplicate or a stray message still shows in the list, and a test that knows how many it sent
    waits out no long quiet after the last of them (`drain`'s)."""
    out = []
    while True:
        try:
            m = consumer.receive(within_ms if len(out) < count else quiet_ms)
        except pulsar.Timeout:
            return out
        consumer.acknowledge(m)
        out.append(m)
