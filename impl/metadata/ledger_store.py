"""Ledger metadata in the metadata store: create, read, the conditional-write loop, delete, list.

Every mutation is read-modify-conditional-write (docs/protocol-rules.md): read the
metadata and its version, apply a pure transition (impl.metadata.transitions), write
the result with the version read. On BadVersion someone else wrote in between:
re-read and apply the transition again, so its precondition is re-checked on what
is actually stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from impl.metadata import layout
from impl.metadata.idgen import LedgerIdGenerator
from impl.metadata.ledger import LedgerMetadata
from impl.metadata.serde import deserialize, serialize
from impl.metadata.store import BadVersion, MetadataError, MetadataStore, NodeExists, NoNode
from impl.metadata.transitions import Adopt, NoWrite, Transition, TransitionError, Write

MAX_CREATE_ATTEMPTS = 10


class NoSuchLedger(MetadataError):
    """The ledger's metadata node does not exist (never created, or deleted)."""

    code = "NoSuchLedgerExistsOnMetadataServerException"


@dataclass(frozen=True)
class UpdateOutcome:
    """What `update` ended with.

    written: this call wrote `metadata` (at `version`); otherwise the transition said
    no write was needed (`adopted` when it adopted someone else's close).
    attempts: how many times the transition was applied (1 + conflicts retried).
    """

    metadata: LedgerMetadata
    version: int
    written: bool
    adopted: bool
    attempts: int


class LedgerMetadataStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.ids = LedgerIdGenerator(store)

    def create(self, metadata: LedgerMetadata) -> int:
        """Store new ledger metadata under a fresh id; returns the id."""
        blob = serialize(metadata)
        for _ in range(MAX_CREATE_ATTEMPTS):
            ledger_id = self.ids.next_id()
            path = layout.ledger_path(ledger_id)
            self.store.ensure_path(path.rsplit("/", 1)[0])
            try:
                self.store.create(path, blob)
            except NodeExists:
                # An id the generator handed out collides with a ledger created by other means
                # (e.g. an explicit id): take the next one, as BookKeeper does.
                continue
            return ledger_id
        raise MetadataError(
            f"could not find a free ledger id in {MAX_CREATE_ATTEMPTS} attempts; "
            f"check who creates nodes under {layout.LEDGERS_ROOT}"
        )

    def create_with_id(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        """Store metadata under a chosen id. Raises NodeExists if that ledger exists."""
        path = layout.ledger_path(ledger_id)
        self.store.ensure_path(path.rsplit("/", 1)[0])
        self.store.create(path, serialize(metadata))

    def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """(metadata, version). Raises NoSuchLedger, or a serde error for a damaged node."""
        path = layout.ledger_path(ledger_id)
        try:
            blob, stat = self.store.get(path)
        except NoNode as e:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist (no node {path})", path) from e
        return deserialize(blob), stat.version

    def update(self, ledger_id: int, transition: Transition) -> UpdateOutcome:
        """Apply `transition` by read-modify-conditional-write until it sticks or says no write.

        Raises the transition's TransitionError (precondition failed on the latest
        metadata), NoSuchLedger, or a store error other than BadVersion.
        """
        path = layout.ledger_path(ledger_id)
        attempts = 0
        while True:
            current, version = self.read(ledger_id)
            attempts += 1
            try:
                result = transition(current)
            except TransitionError as e:
                e.version = version  # which version refused it: orders the refusal among the writes
                raise
            if isinstance(result, NoWrite):
                return UpdateOutcome(current, version, written=False, adopted=False, attempts=attempts)
            if isinstance(result, Adopt):
                return UpdateOutcome(result.metadata, version, written=False, adopted=True, attempts=attempts)
            assert isinstance(result, Write)
            try:
                stat = self.store.set(path, serialize(result.metadata), version)
            except BadVersion:
                continue  # someone wrote in between: re-read, re-check the precondition
            except NoNode as e:
                raise NoSuchLedger(f"ledger {ledger_id} was deleted during an update", path) from e
            return UpdateOutcome(result.metadata, stat.version, written=True, adopted=False, attempts=attempts)

    def delete(self, ledger_id: int, expected_version: int = -1) -> None:
        """Delete the ledger's metadata node. Raises NoSuchLedger; BadVersion if versions differ."""
        path = layout.ledger_path(ledger_id)
        try:
            self.store.delete(path, expected_version)
        except NoNode as e:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist (no node {path})", path) from e

    def ledger_ids(self) -> Iterator[int]:
        """Every stored ledger id, ascending (walks the 2-4-4 and 3-4-4-4-4 hierarchies)."""
        yield from sorted(self._walk(layout.LEDGERS_ROOT, depth=0))

    def _walk(self, path: str, depth: int) -> Iterator[int]:
        try:
            names = self.store.children(path)
        except NoNode:
            return  # nothing created yet, or removed while we walked
        for name in names:
            child = f"{path}/{name}"
            if depth == 0 and not layout.is_ledger_level(name):
                continue
            if name.startswith("L"):
                try:
                    yield layout.ledger_id_from_path(child)
                except layout.InvalidName:
                    continue  # not a ledger node (foreign data); skip rather than fail a listing
            elif name.isdigit():
                yield from self._walk(child, depth + 1)
