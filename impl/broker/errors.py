"""The broker's typed errors, each with a sentence to act on.

The Pulsar listener maps each to Pulsar's ServerError (impl/broker/listener.py) and the
web service to an HTTP status. `rejected` says whether the broker certainly wrote nothing for the
request: a client may then report a send as failed; otherwise its outcome is unknown (the entry
may have reached a bookie and be recovered by the next owner of the topic).
"""

from __future__ import annotations


class BrokerError(Exception):
    rejected = True

    def __init__(self, message: str) -> None:
        super().__init__(message)


class InvalidName(BrokerError):
    pass


class TopicNotFound(BrokerError):
    pass


class ReservedName(BrokerError):
    """A subscription named as replicators' cursors are (Pulsar's "Subscription with reserved subscription
    name attempted"); NotAllowedError on the binary protocol, so that clients do not retry it."""


class NamespaceNotInCluster(BrokerError):
    """The topic's namespace is not replicated to this broker's cluster: its brokers do not serve it
    (Pulsar: "Namespace missing local cluster name in clusters list", 412 / MetadataError)."""


class NotOwner(BrokerError):
    pass


class ServiceNotReady(BrokerError):
    pass


class MessageTooLarge(BrokerError):
    pass


class BookieFrameTooSmall(BrokerError):
    """A registered bookie's frame limit is below the broker's largest entry: the broker does not start."""


class ProducerBusy(BrokerError):
    pass


class ProducerFenced(BrokerError):
    """Exclusive access to the topic was asked for while other producers hold it (Pulsar's ProducerFenced)."""


class ConsumerBusyError(BrokerError):
    pass


class ConsumerAssignError(BrokerError):
    """Key_Shared: the consumer's hash ranges cannot be given (overlap, outside 0-65,535, none left)."""


class UnknownMessageIdError(BrokerError):
    pass


class NotEmptyError(BrokerError):
    pass


class TopicFenced(BrokerError):
    """The managed ledger is FENCED (another broker took the topic over): outcome unknown."""

    rejected = False


class PersistenceError(BrokerError):
    """The bookies did not confirm the entry: outcome unknown."""

    rejected = False


class ProducerBlockedQuotaExceededError(BrokerError):
    """The topic's backlog is over its quota with the producer_request_hold policy (retriable: the
    client tries again until consumers drain the backlog)."""


class ProducerBlockedQuotaExceededException(BrokerError):
    """The topic's backlog is over its quota with the producer_exception policy (the client fails)."""


class NotAllowed(BrokerError):
    """An operation the topic does not have (Pulsar's NotAllowedError): a seek or the last message id
    of a non-persistent topic."""


class TopicTerminated(BrokerError):
    """The topic was terminated (admin `terminate`): no producer may attach or publish any more."""
