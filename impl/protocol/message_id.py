"""A message's id as Pulsar's protocol carries it (MessageIdData): the entry's ledger and entry
ids, and the message's index in its batch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class MessageId:
    ledger_id: int
    entry_id: int
    batch_index: int = 0
