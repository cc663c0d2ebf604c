"""The project's Pulsar client, over Pulsar's binary protocol: connection.py is the pure core of
one connection, transport.py its socket shell, api.py the Client, Producer, Consumer and Reader."""

from impl.client.api import (
    Client,
    Consumer,
    ConsumerMessage,
    PartitionedConsumer,
    PartitionedProducer,
    Producer,
    Reader,
)
from impl.client.errors import ClientError, ConnectionLost, NotAttached, SendRejected, SendUnknown
from impl.protocol.message_id import MessageId

__all__ = [
    "Client",
    "ClientError",
    "ConnectionLost",
    "Consumer",
    "ConsumerMessage",
    "MessageId",
    "NotAttached",
    "PartitionedConsumer",
    "PartitionedProducer",
    "Producer",
    "Reader",
    "SendRejected",
    "SendUnknown",
]
