"""The schema registry on a real cluster (ZooKeeper, three bookies, two broker processes) with the
official client: partitions owned by both brokers register one schema, every broker answers for it,
an evolution is seen everywhere, and the survivor of a SIGKILLed owner keeps enforcing it."""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from impl.broker.web.admin_client import AdminClient
from tests.cluster.conftest import pulsar_ref, state
from tests.cluster.test_cluster_pulsar_client import brokers, topics_of

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


class Order(Record):
    id = Integer()


def order_v2() -> type[Record]:
    class Order(Record):
        id = Integer()
        note = String(required_default=True)  # a default: FULL accepts it

    return Order


def order_bad() -> type[Record]:
    class Order(Record):
        id = String()  # an int read as a string: no Avro promotion, FULL refuses it

    return Order


def test_schema_across_two_brokers_and_an_owner_sigkill(cluster_dir: Path) -> None:
    up = pulsar_ref("cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "2")
    assert up.returncode == 0, up.stderr
    first, second = brokers(cluster_dir)
    webs = [f"http://127.0.0.1:{b['web_port']}" for b in (first, second)]
    admin = AdminClient(webs[0])
    topic = "persistent://public/default/orders"
    admin.create_partitioned_topic(topic, 6)
    client = pulsar.Client(state(cluster_dir)["pulsar_service"], operation_timeout_seconds=60)
    try:
        producer = client.create_producer(topic, schema=AvroSchema(Order))  # a producer per partition
        partitions = [f"{topic}-partition-{i}" for i in range(6)]
        assert topics_of(first, partitions) and topics_of(second, partitions)  # both brokers registered
        for i in range(6):
            producer.send(Order(id=i), partition_key=str(i))
        schema = "/admin/v2/schemas/public/default/orders"
        assert [AdminClient(w).call("GET", f"{schema}/schema")["version"] for w in webs] == [0, 0]
        assert len(admin.call("GET", f"{schema}/schemas")["getSchemaResponses"]) == 1

        v2 = order_v2()
        client.create_producer(topic, schema=AvroSchema(v2)).send(v2(id=100, note="n"))
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(order_bad()))
        assert AdminClient(webs[1]).call("GET", f"{schema}/schema")["version"] == 1

        owner = next(b for b in (first, second) if topics_of(b, [partitions[0]]))
        kill = pulsar_ref("cluster", "kill", "--dir", str(cluster_dir), owner["name"])
        assert kill.returncode == 0, kill.stderr
        survivor = second if owner is first else first
        again = pulsar.Client(f"pulsar://127.0.0.1:{survivor['pulsar_port']}", operation_timeout_seconds=60)
        try:
            with pytest.raises(pulsar.IncompatibleSchema):
                again.create_producer(partitions[0], schema=AvroSchema(order_bad()))
            consumer = again.subscribe(
                partitions[0], "s", schema=AvroSchema(Order), initial_position=pulsar.InitialPosition.Earliest
            )
            got = consumer.receive(30_000)
            assert isinstance(got.value().id, int)
            survivor_admin = AdminClient(f"http://127.0.0.1:{survivor['web_port']}")
            assert [v["version"] for v in survivor_admin.call("GET", f"{schema}/schemas")["getSchemaResponses"]] == [
                0,
                1,
            ]
        finally:
            again.close()
    finally:
        client.close()
