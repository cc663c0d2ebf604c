"""Schema storage as Pulsar's BookkeeperSchemaStorage keeps it (the shell: ledgers and metadata).

Each schema version is the single entry of its own BookKeeper ledger, written and closed before
anything points at it. The topic's locator, /schemas/<tenant>/<ns>/<topic> in the metadata store,
lists the versions with the ledger position and hash of each. A version exists once the locator
names it, and the locator only changes by a conditional write (create, or set at the version read):
of two brokers racing, one write fails and that broker deletes its ledger. A broker that crashes
after writing its ledger and before the locator leaves a ledger nothing points at (tagged with
the schema id in its custom metadata), never a visible half-registered version.

A SchemaStorage is one metadata session (and that session's BookKeeper client): the broker makes a
new one when it renews its session (BrokerService.adopt_session), and a locator read on one session
is never written through another (SessionChanged): spec/schema.md's `cached_after_loss`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from impl.bookie.client.api import BookKeeperClient
from impl.broker.managed_ledger import ManagedLedgerConfig
from impl.broker.schema.model import SchemaData
from impl.metadata import layout
from impl.metadata.naming import TopicName
from impl.metadata.store import BadVersion, MetadataStore, NodeExists, NoNode, SessionExpired

log = logging.getLogger(__name__)


class LocatorConflict(Exception):
    """Another writer changed the locator since it was read: nothing of ours is visible; re-read."""


class SessionChanged(SessionExpired):
    """The locator was read on another metadata session than this storage's: the broker renewed its
    session meanwhile, so its read (and the topic it was made for) belong to a session that is gone.
    Nothing was written; retry (a SessionExpired, so answered ServiceNotReady / 503)."""


@dataclass(frozen=True)
class IndexEntry:
    version: int
    ledger_id: int
    entry_id: int
    hash: str


@dataclass(frozen=True)
class Locator:
    entries: tuple[IndexEntry, ...]
    stat_version: int  # the metadata node's version: the condition of the next write
    session_id: int = 0  # the metadata session that read it (0: not read, only written)

    @property
    def latest(self) -> IndexEntry:
        return self.entries[-1]

    def to_json(self) -> bytes:
        rows = [
            {"version": e.version, "ledger": e.ledger_id, "entry": e.entry_id, "hash": e.hash} for e in self.entries
        ]
        return json.dumps({"index": rows}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, stat_version: int, session_id: int = 0) -> Locator:
        rows = json.loads(data)["index"]
        entries = tuple(IndexEntry(r["version"], r["ledger"], r["entry"], r["hash"]) for r in rows)
        return cls(entries, stat_version, session_id)


def schema_id(name: TopicName) -> TopicName:
    """Partitions share their partitioned topic's schema."""
    return name.base


def locator_path(name: TopicName) -> str:
    sid = schema_id(name)
    return layout.schema_locator_path(sid.tenant, sid.namespace_portion, sid.local_name)


class SchemaStorage:
    def __init__(
        self,
        store: MetadataStore,
        bookkeeper: BookKeeperClient,
        config: ManagedLedgerConfig,
        cache: dict[tuple[int, int], SchemaData] | None = None,  # a previous session's: still true
    ) -> None:
        self.store = store
        self.bookkeeper = bookkeeper
        self.config = config
        # (ledger, entry) -> the version's schema: a version's entry never changes and ledger ids are
        # never reused, so the cache outlives sessions (unlike a locator read, which is the session's).
        self.cache: dict[tuple[int, int], SchemaData] = {} if cache is None else cache

    def on_session(self, store: MetadataStore, bookkeeper: BookKeeperClient) -> SchemaStorage:
        """The same storage on a new metadata session (the broker renewed its own)."""
        return SchemaStorage(store, bookkeeper, self.config, self.cache)

    def locator(self, name: TopicName) -> Locator | None:
        try:
            data, stat = self.store.get(locator_path(name))
        except NoNode:
            return None
        return Locator.from_json(data, stat.version, self.store.session_id)

    def read(self, entry: IndexEntry) -> SchemaData:
        key = (entry.ledger_id, entry.entry_id)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        handle = self.bookkeeper.open_ledger(entry.ledger_id, self.config.password, recovery=False)
        (stored,) = handle.read(entry.entry_id, entry.entry_id)
        schema = SchemaData.from_json(stored.payload)
        self.cache[key] = schema
        return schema

    def add(self, name: TopicName, schema: SchemaData, current: Locator | None) -> int:
        """Store `schema` as the version after `current` (None: the first); LocatorConflict if the
        locator is no longer `current`. Returns the new version."""
        sid = str(schema_id(name))
        if current is not None and current.session_id != self.store.session_id:
            # A read of an older session (cached across a renewal) may still be current data, but the
            # ownership it was made under went with that session: writing it would add a version as a
            # broker that lost the topic (spec/schema.tla's cached_after_loss). Before any ledger.
            raise SessionChanged(
                f"the schema locator of {sid} was read on session 0x{current.session_id:x}, "
                f"not on this broker's session 0x{self.store.session_id:x}; retry",
                locator_path(name),
            )
        c = self.config
        handle = self.bookkeeper.create_ledger(
            c.ensemble,
            c.write_quorum,
            c.ack_quorum,
            digest=c.digest,
            password=c.password,
            custom_metadata={"application": b"pulsar", "component": b"schema", "pulsar/schemaId": sid.encode()},
        )
        try:
            entry_id = handle.add(schema.to_json())
        finally:
            handle.close()
        version = 0 if current is None else current.latest.version + 1
        added = IndexEntry(version, handle.ledger_id, entry_id, schema.hash)
        path = locator_path(name)
        try:
            if current is None:
                self.store.ensure_path(path.rsplit("/", 1)[0])
                self.store.create(path, Locator((added,), 0).to_json())
            else:
                self.store.set(path, Locator((*current.entries, added), 0).to_json(), current.stat_version)
        except (BadVersion, NodeExists, NoNode) as e:
            self._drop_ledger(handle.ledger_id)
            # the cause (BadVersion / NodeExists / NoNode) says which condition failed: spec/schema.md
            raise LocatorConflict(f"the schema locator of {sid} changed meanwhile: {e}") from e
        self.cache[(handle.ledger_id, entry_id)] = schema
        return version

    def delete(self, name: TopicName) -> Locator | None:
        """Remove the locator (conditionally, at the version read), then the ledgers it named."""
        while True:
            current = self.locator(name)
            if current is None:
                return None
            try:
                self.store.delete(locator_path(name), current.stat_version)
            except BadVersion:
                continue  # a version was added meanwhile: delete that one too
            except NoNode:
                return None
            for e in current.entries:
                self.cache.pop((e.ledger_id, e.entry_id), None)
                self._drop_ledger(e.ledger_id)
            return current

    def _drop_ledger(self, ledger_id: int) -> None:
        try:
            self.bookkeeper.delete_ledger(ledger_id)
        except Exception as e:  # an orphan ledger is garbage, never visible: log and go on
            log.warning("could not delete schema ledger %d: %s", ledger_id, e)
