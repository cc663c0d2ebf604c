"""Issue 43's two silent failures, with the official client against a standalone: a message at the
size limit is stored (it wedged its topic: the bookie refused the entry, the add was retried forever),
and KeyBased batches all arrive on the default namespace (de-duplication, now off by default as in
Pulsar, dropped 20 of 30 as duplicates while confirming them)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from tests.broker.pulsar_standalone import Standalone, running_standalone


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


@pytest.fixture
def client(standalone: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    yield c
    c.close()


def topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_message_at_the_size_limit_is_stored_and_the_topic_keeps_serving(client: pulsar.Client) -> None:
    t = topic("big")
    consumer = client.subscribe(t, "s")
    producer = client.create_producer(t, batching_enabled=False, send_timeout_millis=20_000)
    big = b"x" * 5_242_816  # under the 5 MiB advertised; with its metadata over the bookie's old 5 MiB frame
    producer.send(big)
    producer.send(b"after")
    assert consumer.receive(20_000).data() == big
    assert consumer.receive(20_000).data() == b"after"
    with pytest.raises(pulsar.MessageTooBig):  # over the advertised limit: refused at once, nothing stored
        producer.send(b"x" * (5 * 1024 * 1024 + 1))
    producer.send(b"still serving")
    assert consumer.receive(20_000).data() == b"still serving"


def test_keybased_batches_all_arrive_on_the_default_namespace(client: pulsar.Client) -> None:
    t = topic("keybased")
    consumer = client.subscribe(t, "s")
    producer = client.create_producer(t, batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased)
    for i in range(30):
        producer.send_async(b"%d" % i, None, partition_key=f"k{i % 3}")
    producer.flush()
    got = []
    for _ in range(30):
        m = consumer.receive(20_000)
        consumer.acknowledge(m)
        got.append(int(m.data()))
    assert sorted(got) == list(range(30))
