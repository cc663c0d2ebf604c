"""The ledger metadata model (docs/protocol-rules.md, "Ledger metadata").

Immutable values: every change is a new `LedgerMetadata` produced by a pure
transition (`impl.metadata.transitions`) and stored with a conditional write.
Serde to protobuf lives in `impl.metadata.serde`; paths in `impl.metadata.layout`.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

BookieId = str  # "host:port", as registered under /ledgers/available/

NO_ENTRY = -1  # last_entry_id of an empty ledger; also "no LAC yet"


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class DigestType(enum.Enum):
    CRC32C = "crc32c"  # 4 bytes, the default
    CRC32 = "crc32"  # 8 bytes
    HMAC = "hmac"  # HMAC-SHA1 keyed from the password, 20 bytes
    DUMMY = "none"  # no digest


@dataclass(frozen=True)
class Fragment:
    """Entries from `first_entry_id` on (until the next fragment) live on `ensemble`."""

    first_entry_id: int
    ensemble: tuple[BookieId, ...]


@dataclass(frozen=True)
class LedgerMetadata:
    ensemble_size: int  # E
    write_quorum: int  # Qw
    ack_quorum: int  # Qa
    fragments: tuple[Fragment, ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = NO_ENTRY  # meaningful only when CLOSED
    length: int = 0  # bytes of payload; meaningful only when CLOSED
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = b""  # key material: bookies check the master key derived from it
    ctime: int = 0  # creation time, ms since the epoch (set by the shell, not the core)
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size):
            raise ValueError(
                f"need 1 <= Qa <= Qw <= E, got E={self.ensemble_size} Qw={self.write_quorum} Qa={self.ack_quorum}"
            )
        if not self.fragments:
            raise ValueError("a ledger has at least one fragment")
        for fragment in self.fragments:
            if len(fragment.ensemble) != self.ensemble_size:
                raise ValueError(
                    f"fragment {fragment.first_entry_id}: {len(fragment.ensemble)} bookies, E={self.ensemble_size}"
                )
            if len(set(fragment.ensemble)) != len(fragment.ensemble):
                raise ValueError(f"fragment at {fragment.first_entry_id} repeats a bookie: {fragment.ensemble}")
        for earlier, later in zip(self.fragments, self.fragments[1:], strict=False):
            # A second ensemble change at the same entry replaces the fragment (BookKeeper
            # keeps fragments in a map keyed by first entry id), so keys strictly increase.
            if later.first_entry_id <= earlier.first_entry_id:
                raise ValueError("fragments must start at strictly increasing entry ids")
        if self.fragments[0].first_entry_id != 0:
            raise ValueError("the first fragment starts at entry 0")

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    def ensemble_for(self, entry_id: int) -> tuple[BookieId, ...]:
        """The ensemble of the fragment with the greatest first id <= entry_id."""
        chosen = self.fragments[0]
        for fragment in self.fragments:
            if fragment.first_entry_id <= entry_id:
                chosen = fragment
            else:
                break
        return chosen.ensemble

    @property
    def last_ensemble(self) -> tuple[BookieId, ...]:
        return self.fragments[-1].ensemble

    def write_set(self, entry_id: int) -> tuple[BookieId, ...]:
        """The Qw bookies that store entry_id: indices (entry_id + i) mod E of its ensemble."""
        ensemble = self.ensemble_for(entry_id)
        return tuple(ensemble[i] for i in write_set_indices(entry_id, self.ensemble_size, self.write_quorum))


def write_set_indices(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Round-robin striping by absolute entry id (not the offset within the fragment): indices
    (entry_id + i) mod E for i < Qw. Looked up, not built: clients ask for every request and answer."""
    return _write_sets(ensemble_size, write_quorum)[entry_id % ensemble_size]


@functools.cache
def _write_sets(ensemble_size: int, write_quorum: int) -> tuple[tuple[int, ...], ...]:
    """The write set of each entry id mod E."""
    return tuple(tuple((e + i) % ensemble_size for i in range(write_quorum)) for e in range(ensemble_size))
