"""A message's id as Pulsar's protocol carries it (MessageIdData): the entry's ledger and entry
ids, and the message's index in its batch."""

from __future__ import annotations

from typing import NamedTuple


class MessageId(NamedTuple):
    """A NamedTuple (hash, equality and ordering in C), as ledger_list.Position: ids are dict keys of
    the dispatcher's pending messages and compared on every ack."""

    ledger_id: int
    entry_id: int
    batch_index: int = 0
