"""Auto topic creation policies (issue 45, item 4) against a real `pulsar-ref standalone` process: Pulsar's
namespace `autoTopicCreation` admin path, producers and consumers of the official `pulsar` client refused
with TopicNotFound when it is off, topics created partitioned when it says so; bad input answered 400."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone, running_standalone

pytestmark = pytest.mark.processes

NS = "/admin/v2/namespaces/public/auto"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    for s in running_standalone(tmp_path_factory):
        s.admin.call("PUT", NS)
        yield s


@pytest.fixture
def client(standalone: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=10)
    yield c
    c.close()


def status_of(call: Callable[[], Any]) -> int:
    try:
        call()
    except HttpError as e:
        return e.status
    return 200


def test_the_policy_over_the_admin_path(standalone: Standalone) -> None:
    admin = standalone.admin
    assert admin.call("GET", NS + "/autoTopicCreation") is None
    off = {"allowAutoTopicCreation": False, "topicType": "non-partitioned"}
    admin.call("POST", NS + "/autoTopicCreation", off)
    assert admin.call("GET", NS + "/autoTopicCreation") == off
    for bad in (
        {"allowAutoTopicCreation": True, "topicType": "partitioned"},  # no defaultNumPartitions
        {"allowAutoTopicCreation": True, "topicType": "sharded"},
        {"allowAutoTopicCreation": "yes"},
        [],
    ):
        assert status_of(lambda bad=bad: admin.call("POST", NS + "/autoTopicCreation", bad)) == 400, bad
    assert admin.call("GET", NS + "/autoTopicCreation") == off  # unchanged by the bad input
    admin.call("DELETE", NS + "/autoTopicCreation")
    assert admin.call("GET", NS + "/autoTopicCreation") is None


def test_off_refuses_new_topics_but_not_existing_ones(standalone: Standalone, client: pulsar.Client) -> None:
    admin = standalone.admin
    admin.call("POST", NS + "/autoTopicCreation", {"allowAutoTopicCreation": False, "topicType": "non-partitioned"})
    try:
        topic = "persistent://public/auto/never-made"
        with pytest.raises(Exception) as refused:
            client.create_producer(topic)
        assert "TopicNotFound" in type(refused.value).__name__ + str(refused.value)
        with pytest.raises(Exception) as refused:
            client.subscribe(topic, "sub")
        assert "TopicNotFound" in type(refused.value).__name__ + str(refused.value)
        assert status_of(lambda: admin.call("GET", topic_path(topic) + "/stats")) == 404  # nothing was created
        admin.call("PUT", topic_path(topic))  # created explicitly: usable
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"made")
        assert consumer.receive(10_000).data() == b"made"
    finally:
        admin.call("DELETE", NS + "/autoTopicCreation")


def test_partitioned_auto_creation(standalone: Standalone, client: pulsar.Client) -> None:
    admin = standalone.admin
    policy = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}
    admin.call("POST", NS + "/autoTopicCreation", policy)
    try:
        topic = "persistent://public/auto/made-partitioned"
        producer = client.create_producer(topic)
        producer.send(b"x")
        assert admin.call("GET", topic_path(topic) + "/partitions") == {"partitions": 3}
        assert len(client.get_topic_partitions(topic)) == 3
    finally:
        admin.call("DELETE", NS + "/autoTopicCreation")
    plain = "persistent://public/auto/made-plain"  # the broker's default again: non-partitioned
    client.create_producer(plain).send(b"y")
    assert admin.call("GET", topic_path(plain) + "/partitions") == {"partitions": 0}
