"""The client's errors. Outcomes are reported honestly, as a linearizability audit needs them:
`SendRejected` when the broker certainly did not write the message, `SendUnknown` when it may
or may not have (and the message may still appear later)."""

from __future__ import annotations

from impl.protocol import pulsar_api_pb2 as api


class ClientError(Exception):
    """Base of the client's errors. `code` is the broker's ServerError when the broker answered."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def error_name(self) -> str:
        return api.ServerError.Name(self.code) if self.code is not None else "none"


class ConnectionLost(ClientError):
    """The connection to a broker could not be made or broke."""


class NotAttached(ClientError):
    """The consumer is between connections (it subscribes again by itself): nothing was sent; try again."""


class SendRejected(ClientError):
    """The broker certainly did not write the message."""


class SendUnknown(ClientError):
    """The message may or may not have been written."""
