"""The broker's typed errors, each carrying the wire code (broker.proto `Code`) and a sentence to act on.

`rejected` says whether the broker certainly wrote nothing for the request: a client may then
report a send as failed; otherwise its outcome is unknown (the entry may have reached a bookie
and be recovered by the next owner of the topic).
"""

from __future__ import annotations

from impl.broker import broker_pb2 as pb


class BrokerError(Exception):
    code: int = pb.INVALID_ARGUMENT
    rejected = True

    def __init__(self, message: str) -> None:
        super().__init__(message)


class InvalidName(BrokerError):
    code = pb.INVALID_TOPIC_NAME


class TopicNotFound(BrokerError):
    code = pb.TOPIC_NOT_FOUND


class NotOwner(BrokerError):
    code = pb.NOT_OWNER


class ServiceNotReady(BrokerError):
    code = pb.SERVICE_NOT_READY


class MessageTooLarge(BrokerError):
    code = pb.MESSAGE_TOO_LARGE


class ProducerBusy(BrokerError):
    code = pb.PRODUCER_BUSY


class ProducerFenced(BrokerError):
    """Exclusive access to the topic was asked for while other producers hold it (Pulsar's ProducerFenced)."""

    code = pb.PRODUCER_BUSY


class ConsumerBusyError(BrokerError):
    code = pb.CONSUMER_BUSY


class UnknownMessageIdError(BrokerError):
    code = pb.UNKNOWN_MESSAGE_ID


class AlreadyExists(BrokerError):
    code = pb.ALREADY_EXISTS


class NotEmptyError(BrokerError):
    code = pb.NOT_EMPTY


class TopicFenced(BrokerError):
    """The managed ledger is FENCED (another broker took the topic over): outcome unknown."""

    code = pb.TOPIC_FENCED
    rejected = False


class PersistenceError(BrokerError):
    """The bookies did not confirm the entry: outcome unknown."""

    code = pb.PERSISTENCE_ERROR
    rejected = False


CODE_TO_ERROR: dict[int, type[BrokerError]] = {
    cls.code: cls
    for cls in (
        InvalidName,
        TopicNotFound,
        NotOwner,
        ServiceNotReady,
        MessageTooLarge,
        ProducerBusy,
        ConsumerBusyError,
        UnknownMessageIdError,
        AlreadyExists,
        NotEmptyError,
        TopicFenced,
        PersistenceError,
        BrokerError,
    )
}


def error_for(code: int, message: str) -> BrokerError:
    return CODE_TO_ERROR.get(code, BrokerError)(message)
