"""Bookie protocol messages, shared by the bookie core and the BookKeeper client cores.

Plain dataclasses: the shells convert them to and from protobuf at the wire (impl/bookie/wire.py), the
conformance harness passes them over its simulated network. Entry bodies are the
encoded entries of `impl.bookie.entry_format` (header + digest + payload); a bookie
stores them as opaque bytes and reads only the ledger id, entry id and LAC from them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from impl.values import value_type

LAST_ENTRY = -1  # read(entry_id=-1): the last entry this bookie stores for the ledger


class ErrorCode(enum.Enum):
    """BookKeeper's bookie return codes (BookieProtocol / BKException)."""

    EOK = 0
    ENOLEDGER = 1  # the bookie has never seen this ledger
    ENOENTRY = 2  # the ledger is known, the entry is not
    EBADREQ = 3  # malformed request
    EIO = 4  # storage failure
    EUA = 5  # unauthorised: master key mismatch
    EBADVERSION = 6  # protocol version mismatch
    EFENCED = 7  # the ledger is fenced: plain adds are refused
    EREADONLY = 8  # the bookie is read-only (disk full): adds are refused
    ETOOMANYREQUESTS = 9  # back-pressure: retry later
    EUNKNOWNLEDGERSTATE = 10


@value_type  # built for every message: impl/values.py
class AddRequest:
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes  # encoded entry (impl.bookie.entry_format)
    recovery: bool = False  # recovery write-back: skips the fence check, not the key check


@value_type  # built for every message: impl/values.py
class AddResponse:
    ledger_id: int
    entry_id: int
    code: ErrorCode


@dataclass(frozen=True)
class ReadRequest:
    ledger_id: int
    entry_id: int  # LAST_ENTRY (-1) for the last stored entry
    fence: bool = False  # recovery reads fence the ledger first (durably)
    master_key: bytes | None = None  # required when fence is set


@dataclass(frozen=True)
class ReadResponse:
    ledger_id: int
    entry_id: int  # the requested id (for LAST_ENTRY, the id actually returned when EOK)
    code: ErrorCode
    body: bytes = b""  # encoded entry when EOK


@dataclass(frozen=True)
class ReadLacRequest:
    ledger_id: int


@dataclass(frozen=True)
class ReadLacResponse:
    ledger_id: int
    code: ErrorCode
    lac: int = -1  # largest LAC seen piggybacked or set explicitly


@dataclass(frozen=True)
class WriteLacRequest:
    """Explicit LAC (BookKeeper's writeLac): lets readers see the LAC without a new add."""

    ledger_id: int
    master_key: bytes
    lac: int


@dataclass(frozen=True)
class WriteLacResponse:
    ledger_id: int
    code: ErrorCode


Request = AddRequest | ReadRequest | ReadLacRequest | WriteLacRequest
Response = AddResponse | ReadResponse | ReadLacResponse | WriteLacResponse
