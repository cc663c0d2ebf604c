"""Issue 43's message features on a topic whose owner goes away (2-broker cluster): producer access
modes, Key_Shared STICKY ranges and delayed delivery must carry over to the broker that takes it over.
test_cluster_pulsar_client.py sets the topic up on the broker it then kills, and checks it afterwards."""

from __future__ import annotations

import threading
import time

import pulsar
import pytest

from impl.broker.dispatcher import key_slot
from impl.broker.web.admin_client import AdminClient, topic_path

MODE = pulsar.ProducerAccessMode
KEYS = [f"key-{i}" for i in range(24)]
SPLIT = 32768  # low takes slots 0..32,767, high the rest
DELAY_MS = 6000
TICK_MS = 1000  # Pulsar's default delayed-delivery tick: how early a message may come at most


def _drain(consumer: pulsar.Consumer, wait_ms: int = 1500) -> list[pulsar.Message]:
    out: list[pulsar.Message] = []
    while True:
        try:
            m = consumer.receive(wait_ms)
        except pulsar.Timeout:
            return out
        consumer.acknowledge(m)
        out.append(m)


class MovingTopic:
    def __init__(self, service_url: str, admin: AdminClient, topic: str) -> None:
        # A client of its own with short operations: a lookup that fails while the dead owner's session
        # runs out is retried within the operation's time with growing pauses (to 25 s within 60 s);
        # short ones end sooner and the reconnection tries again, so the move costs seconds, not a minute.
        client = self.client = pulsar.Client(service_url, operation_timeout_seconds=5)
        self.admin, self.topic = admin, topic
        # Sends wait out the move: the client backs its lookups off while the dead owner's session runs out.
        self.holder = client.create_producer(
            topic, producer_name="holder", access_mode=MODE.Exclusive, send_timeout_millis=180_000
        )

        def sticky(low: int, high: int) -> pulsar.ConsumerKeySharedPolicy:
            return pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(low, high)])

        self.low, self.high = (
            client.subscribe(
                topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=n, key_shared_policy=policy
            )
            for n, policy in (("low", sticky(0, SPLIT - 1)), ("high", sticky(SPLIT, 65535)))
        )
        self.delayed = client.subscribe(topic, "delayed", consumer_type=pulsar.ConsumerType.Shared)
        epoch = self._epoch()
        assert epoch is not None
        self.epoch_before: int = epoch

    def _epoch(self) -> int | None:
        epoch = self.admin.call("GET", topic_path(self.topic) + "/stats")["topicEpoch"]
        assert epoch is None or isinstance(epoch, int)
        return epoch

    def _send_keys(self, tag: str) -> None:
        for key in KEYS:
            self.holder.send(f"{tag}:{key}".encode(), partition_key=key)

    def _check_sticky(self, tag: str) -> None:
        """Every key lands on the consumer whose range holds its Murmur3 slot, and none is lost."""
        got = {
            name: [m.partition_key() for m in _drain(c) if m.data().startswith(tag.encode())]
            for name, c in (("low", self.low), ("high", self.high))
        }
        assert sorted(got["low"] + got["high"]) == sorted(KEYS), got
        assert all(key_slot(k) < SPLIT for k in got["low"]), got
        assert all(key_slot(k) >= SPLIT for k in got["high"]), got

    def before_move(self) -> None:
        """Exclusive access is held; sticky ranges route; a delayed message waits."""
        with pytest.raises(pulsar.ProducerBusy):  # "Topic has an existing exclusive producer"
            self.client.create_producer(self.topic, access_mode=MODE.Shared)
        self._send_keys("before")
        self._check_sticky("before")
        self.deliver_at = int(time.time() * 1000) + DELAY_MS
        self.holder.send(b"later", deliver_at=self.deliver_at, partition_key="later")
        # The Shared subscription has every message of the topic: all but the delayed one come now.
        got = [m.data() for m in _drain(self.delayed, 500)]
        assert len(got) == len(KEYS) and b"later" not in got, "the delayed message came at once"

    def after_move(self) -> None:
        """On the new owner: the holder kept its exclusive access and epoch, WaitForExclusive queues
        behind it and gets its turn with the next epoch; sticky ranges still route each key where they
        say; the delayed message comes, not before its time."""
        self.holder.send(b"holder after the move")
        assert self._epoch() == self.epoch_before  # kept across owners, not started again
        granted: list[pulsar.Producer] = []
        waiter = threading.Thread(
            target=lambda: granted.append(
                self.client.create_producer(self.topic, producer_name="waiter", access_mode=MODE.WaitForExclusive)
            ),
            daemon=True,
        )
        waiter.start()
        time.sleep(1.0)
        assert not granted, "WaitForExclusive was granted while the holder is connected"
        self._send_keys("after")
        self._check_sticky("after")

        while True:  # after the keyed messages sent since, or before them once it is due
            m = self.delayed.receive(60_000)
            self.delayed.acknowledge(m)
            if m.data() == b"later":
                break
        assert time.time() * 1000 >= self.deliver_at - TICK_MS, "delivered before its time"

        self.holder.close()
        waiter.join(30)
        assert granted, "the waiting producer never got its turn"
        granted[0].send(b"waiter")
        assert self._epoch() == self.epoch_before + 1
        granted[0].close()

    def close(self) -> None:
        self.client.close()
