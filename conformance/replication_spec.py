"""spec/replication.tla against the replication cores (impl/broker/replication/replicator.py).

What runs is the production code: a `Replicator` per <<origin, remote>> (the owner broker's), fed
with typed events through `step`, and a `Deduplication` per cluster's topic, which decides every
publish (local and replicated). The harness is their shell: it keeps each cluster's managed
ledger as a list of entries (replication.tla abstracts the managed ledger to its persisted
entries; entry i is `Position(1, i - 1)`), the durable cursors the replicators persist (by cursor
name, `pulsar.repl.<remote>`), the producer connections (FIFO lists of the `PublishToRemote`
outputs) and the receipts coming back, and which broker owns the topic in each cluster.

Mapping (spec action [lastAction params] -> what the harness does):

  Publish [cluster, seq]         the cluster's producer (named as its cluster) publishes its next
                                 sequence id: Deduplication.step -> Persist -> appended to the log
  ReplicatorReads [origin, remote, pos, sent]
                                 the next entry after the replicator's read position is read:
                                 step(EntriesRead((entry,))) -> PublishToRemote (onto the
                                 connection), PersistMarkDelete (into the cursor store); the
                                 core's ReadEntries requests are not performed: the spec reads
                                 one entry a step, and the harness reads it when the spec does
  RemoteReceives [origin, remote, pos, producer, seq, duplicate]
                                 the remote takes the connection's first message: its
                                 Deduplication.step -> Persist (appended to its log) or Duplicate;
                                 a receipt goes back either way
  ReplicatorReceivesReceipt [origin, remote, pos]
                                 step(SendReceipt(position)) -> PersistMarkDelete
  BrokerCrashes [cluster]        the cluster's replicators: Replicator.restart from the persisted
                                 cursor, then step(Start()); the other clusters' replicators
                                 sending to it: step(ProducerDisconnected()); the connections to
                                 and from it are emptied; its Deduplication is rebuilt from its
                                 log (Deduplication.recover)
  OwnershipChange [cluster, broker]
                                 as a crash, with the new owner's replicators (cores built afresh
                                 from the persisted cursors) and the owner recorded

The abstraction reads the spec's variables from the cores (readPos: the replicator's last read
entry; outstanding: the entries waiting for a receipt; highestSeq: the de-duplication state) and
from the harness's shell state (the logs, the persisted cursors, the connections, the owners).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from conformance.replay import Candidate, Names
from conformance.tla_values import Function, ModelValue, Record, Value
from impl.broker.ledger_list import Position
from impl.broker.replication.replicator import (
    Deduplication,
    Duplicate,
    EntriesRead,
    Entry,
    MessageMetadata,
    Output,
    Persist,
    PersistMarkDelete,
    ProducerDisconnected,
    PublishToRemote,
    ReadEntries,
    Replicator,
    SendReceipt,
    Start,
    cursor_name,
)

SPEC = "replication.tla"
LEDGER = 1  # the one ledger of each cluster's abstract managed ledger
NONE = "none"  # replication.tla's replFrom of a local entry

Pair = tuple[str, str]


class ReplicationHarnessError(Exception):
    """The spec step has no counterpart here (nothing to read, nothing on the connection, ...)."""


def position(index: int) -> Position:
    """The managed-ledger position of the spec's entry `index` (1-based; 0 is before the first)."""
    return Position(LEDGER, index - 1)


def index(pos: Position) -> int:
    return pos.entry_id + 1


@dataclass
class ReplicationWorld:
    clusters: list[str]
    dedup_enabled: bool
    logs: dict[str, list[Entry]]  # each cluster's managed ledger (its persisted entries)
    dedup: dict[str, Deduplication]  # each cluster's topic's de-duplication (core)
    replicators: dict[Pair, Replicator]  # the owner broker's replicator cores
    cursors: dict[tuple[str, str], Position]  # (cluster, cursor name) -> persisted mark-delete position
    inflight: dict[Pair, list[PublishToRemote]] = field(default_factory=dict)
    receipts: dict[Pair, list[Position]] = field(default_factory=dict)
    owner: dict[str, int] = field(default_factory=dict)
    faults: int = 0

    def pairs(self) -> list[Pair]:
        return [(c, r) for c in self.clusters for r in self.clusters if c != r]

    def perform(self, pair: Pair, outputs: list[Output]) -> None:
        """The replicator's outputs, as its shell performs them."""
        origin, remote = pair
        for out in outputs:
            if isinstance(out, PublishToRemote):
                self.inflight[pair].append(out)
            elif isinstance(out, PersistMarkDelete):
                if out.cursor != cursor_name(remote):
                    raise ReplicationHarnessError(f"replicator {pair} persisted the cursor {out.cursor}")
                self.cursors[(origin, out.cursor)] = out.position
            elif isinstance(out, ReadEntries):
                pass  # the spec reads one entry a step (ReplicatorReads)
            else:  # pragma: no cover - the Output union is closed
                raise ReplicationHarnessError(f"unknown output {out!r}")

    def persisted(self, pair: Pair) -> Position:
        return self.cursors[(pair[0], cursor_name(pair[1]))]


class ReplicationMapping:
    spec = SPEC
    symmetric: frozenset[ModelValue] = frozenset()  # no SYMMETRY in the models

    def __init__(self, constants: Mapping[str, Value], *, cores: type[Replicator] | None = None) -> None:
        self.core_type = cores or Replicator  # tests swap in a broken core
        clusters, producing = constants["Clusters"], constants["Producing"]
        assert isinstance(clusters, frozenset) and isinstance(producing, frozenset)
        self.clusters = sorted(c.name for c in clusters if isinstance(c, ModelValue))
        self.producing = {c.name for c in producing if isinstance(c, ModelValue)}
        brokers, max_msgs, max_faults = constants["NumBrokers"], constants["MaxMsgs"], constants["MaxFaults"]
        assert isinstance(brokers, int) and isinstance(max_msgs, int) and isinstance(max_faults, int)
        self.brokers, self.max_msgs, self.max_faults = brokers, max_msgs, max_faults
        self.dedup = constants["Dedup"] is True
        # Dedup = FALSE is a configuration the cores support (at-least-once): its duplicate must be
        # followed. AckBeforeReceipt and ReplicateReplicated are bugs the replicator does not have:
        # their counterexamples are regression traces, which it must refuse; so are issue 47's `Mutation`s.
        self.counterexamples_are_followed = (
            constants["AckBeforeReceipt"] is False
            and constants["ReplicateReplicated"] is False
            and constants.get("Mutation", "none") == "none"
        )

    def _replicator(self, world: ReplicationWorld, pair: Pair) -> Replicator:
        core = self.core_type.restart(pair[0], pair[1], world.persisted(pair))
        world.perform(pair, core.step(Start()))
        return core

    def initial(self, state: Mapping[str, Value]) -> tuple[ReplicationWorld, Names]:
        world = ReplicationWorld(
            self.clusters,
            self.dedup,
            logs={c: [] for c in self.clusters},
            dedup={c: Deduplication(self.dedup) for c in self.clusters},
            replicators={},
            cursors={},
            owner={c: 1 for c in self.clusters},
        )
        for pair in world.pairs():
            world.cursors[(pair[0], cursor_name(pair[1]))] = position(0)  # the cursor created at the start
            world.inflight[pair], world.receipts[pair] = [], []
            world.replicators[pair] = self._replicator(world, pair)
        return world, {}

    def candidates(self, world: ReplicationWorld, names: Names, action: str) -> list[Candidate]:
        run = getattr(self, f"_{action}", None)
        if run is None:
            raise KeyError(f"replication.tla action {action} has no mapping")
        if action in ("Publish", "BrokerCrashes"):
            return [Candidate(f"{action} {c}", {"cluster": ModelValue(c)}, _bind(run, c)) for c in self.clusters]
        if action == "OwnershipChange":
            return [
                Candidate(f"{action} {c} to broker {b}", {"cluster": ModelValue(c), "broker": b}, _bind(run, c, b))
                for c in self.clusters
                for b in range(1, self.brokers + 1)
            ]
        return [
            Candidate(f"{action} {c}->{r}", {"origin": ModelValue(c), "remote": ModelValue(r)}, _bind(run, (c, r)))
            for c, r in world.pairs()
        ]

    # ---- actions ------------------------------------------------------------------------------
    def _Publish(self, world: ReplicationWorld, cluster: str) -> None:
        log = world.logs[cluster]
        published = sum(1 for e in log if not e.metadata.replicated)
        if cluster not in self.producing or published >= self.max_msgs:
            raise ReplicationHarnessError(f"{cluster}'s producer has published all it publishes")
        metadata = MessageMetadata(cluster, published + 1, publish_time=len(log) + 1)
        decision = world.dedup[cluster].step(metadata)
        if not isinstance(decision, Persist):
            raise ReplicationHarnessError(f"{cluster}'s own publish was taken for a duplicate: {decision}")
        log.append(Entry(position(len(log) + 1), metadata, f"{cluster}-{published + 1}".encode()))

    @staticmethod
    def _ReplicatorReads(world: ReplicationWorld, pair: Pair) -> None:
        core, log = world.replicators[pair], world.logs[pair[0]]
        following = [e for e in log if e.position > core.last_read]
        if not following:
            raise ReplicationHarnessError(f"replicator {pair}: nothing after {core.last_read} to read")
        world.perform(pair, core.step(EntriesRead((following[0],))))

    @staticmethod
    def _RemoteReceives(world: ReplicationWorld, pair: Pair) -> None:
        connection = world.inflight[pair]
        if not connection:
            raise ReplicationHarnessError(f"nothing on the connection {pair}")
        message = connection.pop(0)
        remote = pair[1]
        decision = world.dedup[remote].step(message.metadata)
        if isinstance(decision, Persist):
            log = world.logs[remote]
            log.append(Entry(position(len(log) + 1), message.metadata, message.payload))
        else:
            assert isinstance(decision, Duplicate)
        world.receipts[pair].append(message.position)

    @staticmethod
    def _ReplicatorReceivesReceipt(world: ReplicationWorld, pair: Pair) -> None:
        receipts = world.receipts[pair]
        if not receipts:
            raise ReplicationHarnessError(f"no receipt on its way to {pair}")
        world.perform(pair, world.replicators[pair].step(SendReceipt(receipts.pop(0))))

    def _restart(self, world: ReplicationWorld, cluster: str) -> None:
        if world.faults >= self.max_faults:
            raise ReplicationHarnessError("no fault left")
        world.faults += 1
        world.dedup[cluster] = Deduplication.recover(world.dedup_enabled, (e.metadata for e in world.logs[cluster]))
        for pair in world.pairs():
            if cluster not in pair:
                continue
            world.inflight[pair].clear()
            world.receipts[pair].clear()
            if pair[0] == cluster:  # the topic's (new) owner starts its replicators from the cursors
                world.replicators[pair] = self._replicator(world, pair)
            else:  # a replicator sending to the cluster: its producer reconnects
                world.perform(pair, world.replicators[pair].step(ProducerDisconnected()))

    def _BrokerCrashes(self, world: ReplicationWorld, cluster: str) -> None:
        self._restart(world, cluster)

    def _OwnershipChange(self, world: ReplicationWorld, cluster: str, broker: int) -> None:
        if world.owner[cluster] == broker:
            raise ReplicationHarnessError(f"broker {broker} owns the topic in {cluster} already")
        self._restart(world, cluster)
        world.owner[cluster] = broker

    # ---- the abstraction ----------------------------------------------------------------------
    def abstract(self, world: ReplicationWorld, names: Names) -> dict[str, Value]:
        def cluster(name: str) -> ModelValue:
            return ModelValue(name)

        def repl_from(metadata: MessageMetadata) -> Value:
            return cluster(metadata.replicated_from) if metadata.replicated else NONE

        def per_pair(value: Callable[[Pair], Value]) -> Function:
            return Function.of({(cluster(c), cluster(r)): value((c, r)) for c, r in world.pairs()})

        def entry(e: Entry) -> Record:
            m = e.metadata
            return Record.of({"producer": cluster(m.producer_name), "seq": m.sequence_id, "replFrom": repl_from(m)})

        def message(m: PublishToRemote) -> Record:
            md = m.metadata
            return Record.of(
                {
                    "pos": index(m.position),
                    "producer": cluster(md.producer_name),
                    "seq": md.sequence_id,
                    "replFrom": repl_from(md),
                }
            )

        return {
            "log": Function.of({cluster(c): tuple(entry(e) for e in world.logs[c]) for c in self.clusters}),
            "highestSeq": Function.of(
                {
                    cluster(c): Function.of({cluster(p): world.dedup[c].highest.get(p, 0) for p in self.clusters})
                    for c in self.clusters
                }
            ),
            "cursor": per_pair(lambda x: index(world.persisted(x))),
            "readPos": per_pair(lambda x: index(world.replicators[x].last_read)),
            "outstanding": per_pair(lambda x: tuple(index(p) for p in world.replicators[x].waiting)),
            "inflight": per_pair(lambda x: tuple(message(m) for m in world.inflight[x])),
            "receipts": per_pair(lambda x: tuple(index(p) for p in world.receipts[x])),
            "owner": Function.of({cluster(c): world.owner[c] for c in self.clusters}),
            "faults": world.faults,
        }


def _bind(run: Callable[..., None], *args: object) -> Callable[[ReplicationWorld], None]:
    return lambda world: run(world, *args)
