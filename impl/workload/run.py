"""A workload run: P logical processes append and read on several topics while the nemesis acts,
then every fault is healed and one final read per topic reads everything. With consumers, C more
processes consume from a subscription of every type on every topic (impl/workload/consumers.py), and
after the final reads every subscription drains. Non-persistent topics (`domain`, impl/workload/non_persistent.py)
are only appended to and consumed live: no reads, no final read, no drain.

Processes are threads. Each runs one operation at a time (docs/history.md); when one of its operations
ends `info` the thread continues as a fresh process id with a fresh client, because the old
process's operation may still take effect at any later time. Appended values are "<process>-<n>",
unique in the run. Topics get a per-run prefix, so a run against a long-lived cluster never reads
another run's values (they would look like phantoms to the audit).
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from impl.workload import geo, lifecycle, non_persistent, operations
from impl.workload.consumers import Consumers, assign, backlog_of, subscriptions
from impl.workload.history import HistoryWriter
from impl.workload.nemesis import Nemesis
from impl.workload.operations import ClientSession, Outcome, Position, Session
from impl.workload.schemas import SchemaPlan, record_registry

if TYPE_CHECKING:
    from impl.workload.official import OfficialSession  # imports the official client: only where used

CONNECT_TIMEOUT_S = 60.0
FINAL_READ_TIMEOUT_S = 120.0
RECENT_POSITIONS = 32
KEYS = 8  # distinct message keys when consumers run (Key_Shared routes by key)
Progress = Callable[[str], None]
T = TypeVar("T")


class WorkloadError(Exception):
    """The workload could not run (service unreachable, topics not created); the message says why."""


@dataclass
class WorkloadConfig:
    service: str
    out: Path
    topics: int = 3
    partitions: int = 2  # partitions of the one partitioned topic (0 = none)
    processes: int = 5
    ops: int = 1000
    rate: float = 50.0  # invocations per second over all processes (0 = as fast as possible)
    read_fraction: float = 0.4
    max_limit: int = 20
    seed: int | None = None
    final_read_timeout_s: float = FINAL_READ_TIMEOUT_S  # how long the final reads may keep failing
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    client: str = "project"  # "project": the project's client; "official": Apache Pulsar's (pulsar-client)
    admin_url: str | None = None  # the admin REST API (http://) that creates the partitioned topic
    credentials: operations.Credentials = field(default_factory=operations.Credentials)  # token, TLS trust
    consumers: int = 0  # consumer processes (0: no subscriptions, no consumers)
    # Several clusters of an instance (impl/workload/geo.py): name -> (pulsar:// service URL, http:// admin URL).
    # Every operation goes to one of them, in a namespace replicated to all; empty: the one `service`.
    clusters: dict[str, tuple[str, str]] = field(default_factory=dict)
    geo_deduplication: bool = True  # the replicated namespace's de-duplication (off: at-least-once replication)
    deduplication: bool = True  # one cluster: topic-level de-duplication on the persistent topics (needs admin_url)
    domain: str = non_persistent.PERSISTENT  # or non-persistent, or mixed (impl/workload/non_persistent.py)
    schema: str = "none"  # typed producers and consumers (impl/workload/schemas.py): none, json or avro
    # The topics in a namespace of their own with retention, offload and compaction at small thresholds
    # (impl/workload/lifecycle.py); needs admin_url, one cluster.
    lifecycle: bool = False

    @property
    def geo(self) -> bool:
        return len(self.clusters) > 1

    @property
    def namespace(self) -> str:
        if self.geo:
            return f"public/geo-{self.run_id}"
        return f"public/lifecycle-{self.run_id}" if self.lifecycle else "public/default"

    def plain_topics(self) -> list[str]:
        domains = [non_persistent.plain_domain(self.domain, i) for i in range(self.topics)]
        return [f"{d}://{self.namespace}/w{self.run_id}-t{i}" for i, d in enumerate(domains)]

    def partitioned_topic(self) -> str | None:
        domain = non_persistent.partitioned_domain(self.domain)
        return f"{domain}://{self.namespace}/w{self.run_id}-p" if self.partitions > 0 else None

    def log_topics(self) -> list[str]:
        """Every topic that is one log in the history: the plain topics and each partition."""
        base = self.partitioned_topic()
        partitions = [f"{base}-partition-{i}" for i in range(self.partitions)] if base else []
        return self.plain_topics() + partitions


@dataclass
class Summary:
    history: Path
    events: int
    ok: int
    fail: int
    info: int
    faults: int
    unhealed: list[str]
    final_entries: dict[str, int]
    subscriptions: int = 0  # those that drain: of persistent topics
    drained: int = 0
    live_subscriptions: int = 0  # of non-persistent topics: consumed live, never drained
    dropped: dict[tuple[str, str], int] = field(default_factory=dict)  # the broker's drops per live subscription
    schema_versions: dict[str, list[int]] = field(default_factory=dict)  # registry versions per topic (typed runs)
    # --lifecycle: per log topic, (ledgers offloaded, ledgers listed) after the final reads (None: stats unread)
    offloaded: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    compacted: list[str] = field(default_factory=list)  # --lifecycle: the topics a compaction completed on
    # --lifecycle under faults: per topic, how its compaction on demand while the nemesis acted ended
    compacted_under_faults: dict[str, str] = field(default_factory=dict)


class Workload:
    def __init__(self, config: WorkloadConfig, nemesis: Nemesis | None, history: HistoryWriter) -> None:
        self.config = config
        self.nemesis = nemesis
        self.history = history
        self.topics = config.log_topics()
        self.readable = set(non_persistent.persistent(self.topics))  # a non-persistent topic keeps nothing to read
        self._process_ids = itertools.count()
        self._ids_lock = threading.Lock()
        self._invoked = 0
        self._ops_lock = threading.Lock()
        self._next_slot = time.monotonic()
        self._pace_lock = threading.Lock()
        # Positions seen lately, per (cluster, topic): a read may start at one (each cluster has its own log).
        self.clusters = sorted(config.clusters) if config.geo else [""]
        self._recent: dict[tuple[str, str], list[Position]] = {(c, t): [] for c in self.clusters for t in self.topics}
        self._recent_lock = threading.Lock()
        self._stop = threading.Event()
        self._appends_done = threading.Event()  # the workers are finished
        self._compacted_under_faults: dict[str, str] = {}
        self.schema = SchemaPlan(config.schema)
        self._consumers_stop = threading.Event()
        base = config.partitioned_topic()
        subs = subscriptions(config.plain_topics(), base, config.partitions) if config.consumers else []
        self.consumers = Consumers(history, subs, self._new_process, self._connect, self._consumers_stop)

    # --- shared state --------------------------------------------------------------------------

    def _new_process(self) -> int:
        with self._ids_lock:
            return next(self._process_ids)

    def _take_op(self) -> bool:
        with self._ops_lock:
            if self._invoked >= self.config.ops or self._stop.is_set():
                return False
            self._invoked += 1
            if self.schema.typed and self._invoked == self.config.ops // 2 + 1:
                self.schema.evolve()  # mid-run, while the nemesis acts: later producers register version 1
            return True

    def _pace(self) -> None:
        if self.config.rate <= 0:
            return
        with self._pace_lock:
            slot = max(time.monotonic(), self._next_slot)
            self._next_slot = slot + 1.0 / self.config.rate
        time.sleep(max(0.0, slot - time.monotonic()))

    def _remember(self, cluster: str, topic: str, positions: list[Position]) -> None:
        with self._recent_lock:
            recent = self._recent[(cluster, topic)]
            recent.extend(positions)
            del recent[:-RECENT_POSITIONS]

    def _recent_position(self, cluster: str, topic: str, rng: random.Random) -> Position | None:
        with self._recent_lock:
            recent = self._recent[(cluster, topic)]
            return list(rng.choice(recent)) if recent else None

    # --- the run ---------------------------------------------------------------------------------

    def prepare(self, progress: Progress) -> None:
        """Create the partitioned topic and the subscriptions, among them one per topic that retains everything for
        the final reads (outside the history: set-up, not operations)."""
        if self.config.geo:
            self._create_namespace(progress)
        if self.config.lifecycle:
            self._create_lifecycle_namespace(progress)
        base = self.config.partitioned_topic()
        if base is not None:
            self._create_partitioned(base, progress)
        topics = non_persistent.persistent(self.config.plain_topics() + ([base] if base else []))
        if not self.config.geo and topics:
            self._enable_deduplication(topics, progress)
        for cluster in self.clusters:  # in every cluster: its log is trimmed past what all its cursors passed
            session = self._connect(cluster)
            try:
                self._create_subscriptions(session, topics)
            finally:
                session.close()
        if self.consumers.subs:
            progress(f"created {len(self.consumers.subs)} subscriptions (every type on every topic)")

    def _create_subscriptions(self, session: Session, topics: list[str]) -> None:
        self._retrying(
            lambda: self.consumers.create_subscriptions(session, topics),
            lambda e: f"could not create the subscriptions: {e}",
            pause_s=1.0,
        )

    def _create_namespace(self, progress: Progress) -> None:
        names = sorted(self.config.clusters)
        admin = self.config.clusters[names[0]][1]
        ns, dedup = self.config.namespace, self.config.geo_deduplication
        self._retrying(
            lambda: geo.create_replicated_namespace(admin, ns, names, dedup, self.config.credentials),
            lambda e: f"could not create the replicated namespace {ns} at {admin}: {e}",
            pause_s=1.0,
        )
        progress(f"created {ns}, replicated to {', '.join(names)}, de-duplication {'on' if dedup else 'off'}")

    def _enable_deduplication(self, topics: list[str], progress: Progress) -> None:
        """Exactly-once publishing, which the audit holds the log to (`duplicate-value`): without it a
        producer's resend after a fault may be stored twice, as Pulsar allows when it is off."""
        if not self.config.deduplication:
            progress("de-duplication left as the namespace has it: a resend after a fault may be stored twice")
            return
        if not self.config.admin_url:
            progress("warning: no admin URL, de-duplication not turned on: duplicate-value may be found")
            return
        admin = self.config.admin_url
        self._retrying(
            lambda: operations.enable_deduplication(admin, topics, self.config.credentials),
            lambda e: f"could not turn de-duplication on at {admin}: {e}",
            pause_s=1.0,
        )
        progress(f"de-duplication on for {len(topics)} topics")

    def _create_lifecycle_namespace(self, progress: Progress) -> None:
        if not self.config.admin_url:
            raise WorkloadError("--lifecycle sets the namespace's policies through a broker's admin REST API")
        admin, ns = self.config.admin_url, self.config.namespace
        self._retrying(
            lambda: lifecycle.create_namespace(admin, ns, self.config.credentials),
            lambda e: f"could not create {ns} with its storage policies at {admin}: {e}",
            pause_s=1.0,
        )
        shown = ", ".join(f"{k}={v}" for k, v in lifecycle.policies().items())
        progress(f"created {ns}: {shown}")

    def _create_partitioned(self, base: str, progress: Progress) -> None:
        if not self.config.admin_url:
            raise WorkloadError("the partitioned topic needs a broker's admin REST API (admin_url)")
        admin = self.config.admin_url
        self._retrying(
            lambda: operations.create_partitioned_topic(admin, base, self.config.partitions, self.config.credentials),
            lambda e: f"could not create the partitioned topic {base} at {admin}: {e}",
            pause_s=1.0,
        )
        progress(f"created {base} with {self.config.partitions} partitions")

    def _connect(self, cluster: str = "") -> Session:
        service = self.config.clusters[cluster][0] if cluster else self.config.service

        def session() -> Session:
            if self.config.client == "official":
                from impl.workload.official import OfficialSession

                return OfficialSession(service, self.config.credentials, self.schema)
            return ClientSession(service, self.config.credentials)

        return self._retrying(
            session,
            lambda e: f"no broker answered at {service} within {CONNECT_TIMEOUT_S:.0f}s ({e}); is the cluster up?",
            pause_s=0.5,
        )

    def _retrying(self, action: Callable[[], T], failure: Callable[[str], str], pause_s: float) -> T:
        """`action`, tried again every `pause_s` until it works or CONNECT_TIMEOUT_S passed (WorkloadError)."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            try:
                return action()
            except Exception as e:
                if time.monotonic() > deadline or self._stop.is_set():
                    raise WorkloadError(failure(operations.describe(e))) from None
                time.sleep(pause_s)

    def run(self, progress: Progress) -> Summary:
        self.prepare(progress)
        workers = [
            threading.Thread(target=self._worker, args=(i,), name=f"process-{i}", daemon=True)
            for i in range(self.config.processes)
        ]
        seed = self.config.seed
        consumers = [
            threading.Thread(
                target=self.consumers.run,
                args=(sub, None if seed is None else seed * 1000 + 500 + i),
                name=f"consumer-{i}",
                daemon=True,
            )
            for i, sub in enumerate(assign(self.consumers.subs, self.config.consumers) if self.consumers.subs else [])
        ]
        reporter = threading.Thread(target=self._report, args=(progress,), name="progress", daemon=True)
        # While the producers send and the nemesis acts: compactions on demand, each followed by a compacted read.
        under_faults: list[threading.Thread] = []
        if self.config.lifecycle and self.nemesis is not None and self.nemesis.faults:
            target = self._compact_under_faults
            under_faults.append(threading.Thread(target=target, args=(progress,), name="compaction", daemon=True))
        if self.nemesis is not None:
            self.nemesis.start()
        for w in workers + consumers + under_faults:
            w.start()
        reporter.start()
        try:
            for w in workers:
                w.join()
            self._appends_done.set()
            self._consumers_stop.set()
            for w in consumers + under_faults:
                w.join()
        except KeyboardInterrupt:
            self._stop.set()
            self._consumers_stop.set()
            progress("interrupted: finishing the operations in flight, healing, final reads ...")
            for w in workers + consumers + under_faults:
                w.join(3 * operations.APPEND_TIMEOUT_S)
        unhealed: list[str] = []
        if self.nemesis is not None:
            progress("healing every fault ...")
            unhealed = self.nemesis.heal_all()
            if unhealed:
                progress(f"warning: could not heal {', '.join(unhealed)}; final reads may fail")
        self._stop.set()
        if self.config.lifecycle:
            self._compact_then_append(progress)
        final = self._final_reads(progress)
        drained = 0
        durable = [s for s in self.consumers.subs if not non_persistent.is_non_persistent(s.topic)]
        live = [s for s in self.consumers.subs if non_persistent.is_non_persistent(s.topic)]
        dropped: dict[tuple[str, str], int] = {}
        if self.consumers.subs and not self.config.admin_url:
            raise WorkloadError("draining the subscriptions needs a broker's admin REST API (admin_url)")
        if live and self.config.admin_url:
            dropped = non_persistent.drop_counts(self.config.admin_url, self.config.credentials, live)
            progress(f"the broker dropped {sum(dropped.values())} messages on {len(live)} non-persistent subscriptions")
        if durable and self.config.admin_url:
            progress(f"draining {len(durable)} subscriptions ...")
            backlog = backlog_of(self.config.admin_url, self.config.credentials)
            ttl = lifecycle.MESSAGE_TTL_S if self.config.lifecycle else None
            draining = Consumers(
                self.history, durable, self._new_process, self._connect, self._consumers_stop, message_ttl=ttl
            )
            drained = draining.drain(backlog, time.monotonic() + self.config.final_read_timeout_s, progress)
        if self.config.lifecycle:
            self._compacted_reads(progress)
        versions: dict[str, list[int]] = {}
        if self.schema.typed:
            versions = self._record_registry(progress)
        offloaded, compacted = self._lifecycle_state(progress) if self.config.lifecycle else ({}, [])
        reporter.join(5)
        counts = self.history.counts
        return Summary(
            self.history.path,
            self.history.events,
            counts["ok"],
            counts["fail"],
            counts["info"],
            self.nemesis.injected if self.nemesis else 0,
            unhealed,
            final,
            len(durable),
            drained,
            len(live),
            dropped,
            versions,
            offloaded,
            compacted,
            dict(self._compacted_under_faults),
        )

    def _lifecycle_state(self, progress: Progress) -> tuple[dict[str, tuple[int, int] | None], list[str]]:
        """Per persistent log topic, its ledgers offloaded and listed, and whether a compaction completed."""
        assert self.config.admin_url is not None
        offloaded: dict[str, tuple[int, int] | None] = {}
        compacted: list[str] = []
        for topic in [t for t in self.topics if t in self.readable]:
            stats = lifecycle.internal_stats(self.config.admin_url, topic, self.config.credentials)
            if stats is None:
                offloaded[topic] = None
                continue
            offloaded[topic] = (len(lifecycle.offloaded_ledgers(stats)), len(stats.get("ledgers", [])))
            if lifecycle.compacted(stats):
                compacted.append(topic)
        shown = ", ".join(
            f"{t.rsplit('/', 1)[-1]}={'?' if n is None else f'{n[0]}/{n[1]}'}" for t, n in offloaded.items()
        )
        progress(f"ledgers offloaded/listed: {shown}; compacted: {len(compacted)} of {len(offloaded)} topics")
        return offloaded, compacted

    def _compact_then_append(self, progress: Progress) -> None:
        """Per persistent log topic, once healed: a value and a tombstone of one key, a compaction on demand up to
        the topic's end, then TAIL_APPENDS more keyed appends (tombstones among them) after its horizon, fewer bytes
        than the compaction threshold (lifecycle.around_compaction), so that the compacted read at the end sees
        compacted keys, a deleted one among them, and then messages after the horizon."""
        assert self.config.admin_url is not None
        admin, credentials = self.config.admin_url, self.config.credentials
        topics = [t for t in self.topics if t in self.readable]
        rng = random.Random(None if self.config.seed is None else self.config.seed * 1000 + 999)
        plans = {t: lifecycle.around_compaction(rng, KEYS, self._tombstones) for t in topics}
        self._append_each({t: before for t, (before, _) in plans.items()})
        compacted = sum(lifecycle.compact(admin, t, credentials) == "SUCCESS" for t in topics)
        self._append_each({t: after for t, (_, after) in plans.items()})
        progress(f"compacted on demand: {compacted} of {len(topics)} topics, then appended after")

    def _append_each(self, plans: dict[str, list[tuple[str, bool]]]) -> None:
        """Per topic, its (key, tombstone) appends, in order, by one process (a new one after an `info`)."""
        process, n = self._new_process(), 0
        session: Session | None = None
        try:
            for topic, plan in plans.items():
                for key, tombstone in plan:
                    if session is None:
                        session = self._connect()
                    n += 1
                    if self._append(session, process, "", topic, f"{process}-{n}", key, tombstone) == "info":
                        session.close()
                        session, process, n = None, self._new_process(), 0
        finally:
            if session is not None:
                session.close()

    def _compact_under_faults(self, progress: Progress) -> None:
        """Per persistent log topic, while the producers still send and the nemesis acts: a compaction on demand
        (lifecycle.compact), begun while a fault is in effect if one comes soon, then one read-compacted, so that
        the read has a horizon and races both the faults and the appends after the horizon. How the compaction
        ended is logged and recorded on the read's invoke (`compaction`): under a fault it may fail or time out,
        no error of the run (the read then shows an older horizon, or none); a read whose horizon could not be read
        or moved ends `fail`, and the audit judges the `ok` ones as the final ones."""
        from impl.workload.official import OfficialSession

        assert self.nemesis is not None and self.config.admin_url is not None
        start = max(1, int(self.config.ops * lifecycle.COMPACTION_UNDER_FAULTS_AFTER))
        while self._invoked < start and not self._appends_done.is_set() and not self._stop.is_set():
            time.sleep(0.05)
        topics = [t for t in self.topics if t in self.readable]
        process = self._new_process()
        session: OfficialSession | None = None
        try:
            for topic in topics:
                # A fault comes within two of the schedule's steps (a fault, then a heal).
                deadline = time.monotonic() + 2 * self.nemesis.interval_s + 1.0
                while self.nemesis.active is None and time.monotonic() < deadline and not self._appends_done.is_set():
                    time.sleep(0.05)
                if self._stop.is_set():
                    return
                progress(f"compaction on demand of {topic} under faults: fault {self.nemesis.describe()} ...")
                ended = lifecycle.compact(
                    self.config.admin_url, topic, self.config.credentials, lifecycle.COMPACTION_UNDER_FAULTS_TIMEOUT_S
                )
                self._compacted_under_faults[topic] = ended
                if session is None:
                    try:
                        session = OfficialSession(self.config.service, self.config.credentials, self.schema)
                    except Exception as e:  # the broker down: no read of this topic, the next one tries again
                        progress(f"no compacted read of {topic} under faults: no client ({operations.describe(e)})")
                        continue
                self._read_compacted_once(session, process, topic, compaction=ended)
        finally:
            if session is not None:
                session.close()
            shown = lifecycle.describe_compactions(self._compacted_under_faults)
            later = "" if self._appends_done.is_set() else " (the producers still sending)"
            progress(f"compactions on demand under faults: {shown or 'none'}{later}")

    def _read_compacted_once(self, session: OfficialSession, process: int, topic: str, **fields: str) -> Outcome:
        """One read-compacted of `topic`, recorded (`fields` on its invoke) and returned: `ok` with the horizon read
        from the internal stats before and after it, `fail` when either read failed or the horizon moved in between
        (what it should show is unknown)."""
        assert self.config.admin_url is not None
        admin, credentials = self.config.admin_url, self.config.credentials
        before = lifecycle.internal_stats(admin, topic, credentials)
        self.history.invoke(process, "read-compacted", topic, **fields)
        outcome = session.read_compacted(topic)
        after = lifecycle.internal_stats(admin, topic, credentials)
        horizon = lifecycle.horizon(before) if before is not None else None
        moved = after is None or horizon != lifecycle.horizon(after)
        if outcome.kind == "ok" and before is not None and not moved:
            self.history.complete(process, "ok", "read-compacted", topic, horizon=horizon, **outcome.fields)
            return outcome
        error = outcome.fields.get("error") or "the compaction horizon moved or could not be read"
        self.history.complete(process, "fail", "read-compacted", topic, error=error)
        return Outcome("fail", {"error": error})

    def _compacted_reads(self, progress: Progress) -> None:
        """Per persistent log topic: one `ok` read-compacted from the earliest through the official client (the
        project's has no read_compacted), retried (each try recorded) until it works. Its completion carries the
        horizon, read from the internal stats before and after the read: a read during which it moved (the ticker
        compacted meanwhile) or that could not be read is recorded `fail` (a read changes nothing), since what it
        should show is unknown."""
        from impl.workload.official import OfficialSession

        topics = [t for t in self.topics if t in self.readable]
        process = self._new_process()
        deadline = time.monotonic() + self.config.final_read_timeout_s
        session: OfficialSession | None = None
        counts: dict[str, int] = {}
        try:
            for topic in topics:
                while True:
                    if session is None:
                        session = self._retrying(
                            lambda: OfficialSession(self.config.service, self.config.credentials, self.schema),
                            lambda e: f"no broker answered at {self.config.service} for the compacted reads ({e})",
                            pause_s=0.5,
                        )
                    outcome = self._read_compacted_once(session, process, topic)
                    if outcome.kind == "ok":
                        counts[topic] = len(outcome.fields["value"])
                        break
                    if time.monotonic() > deadline:
                        error = outcome.fields["error"]
                        raise WorkloadError(f"the compacted read of {topic} kept failing (last: {error})")
                    session.close()
                    session = None
                    time.sleep(1.0)
        finally:
            if session is not None:
                session.close()
        shown = ", ".join(f"{t.rsplit('/', 1)[-1]}={c}" for t, c in counts.items())
        progress(f"compacted reads: {shown}")

    def _record_registry(self, progress: Progress) -> dict[str, list[int]]:
        if not self.config.admin_url:
            raise WorkloadError("recording the schema registry's versions needs a broker's admin REST API (admin_url)")
        base = self.config.partitioned_topic()
        topics = self.config.plain_topics() + ([base] if base else [])
        found = record_registry(
            self.history, self._new_process(), topics, self.config.admin_url, self.config.credentials
        )
        progress("schema versions: " + ", ".join(f"{t.rsplit('/', 1)[-1]}={v}" for t, v in found.items()))
        return found

    def _worker(self, slot: int) -> None:
        seed = None if self.config.seed is None else self.config.seed * 1000 + slot
        rng = random.Random(seed)
        process, n = self._new_process(), 0
        sessions: dict[str, Session] = {}  # per cluster ("" when there is one)
        try:
            while self._take_op():
                self._pace()
                cluster = rng.choice(self.clusters)
                if cluster not in sessions:
                    sessions[cluster] = self._connect(cluster)
                session = sessions[cluster]
                topic = rng.choice(self.topics)
                if rng.random() < self.config.read_fraction and topic in self.readable:
                    kind = self._read(session, process, cluster, topic, rng)
                else:
                    n += 1
                    # Keyed for Key_Shared subscriptions, and for compaction, which keeps the last value per key.
                    keyed = self.config.consumers or self.config.lifecycle
                    key = f"k{rng.randrange(KEYS)}" if keyed else None
                    tombstone = self._tombstones and rng.random() < lifecycle.TOMBSTONE_FRACTION
                    kind = self._append(session, process, cluster, topic, f"{process}-{n}", key, tombstone)
                if kind == "info":  # the old process may still take effect: continue as a new one
                    for old in sessions.values():
                        old.close()
                    sessions = {}
                    process, n = self._new_process(), 0
        except WorkloadError as e:
            print(f"process slot {slot} stopped: {e}", file=sys.stderr, flush=True)
        finally:
            for session in sessions.values():
                session.close()

    @staticmethod
    def _where(cluster: str) -> dict[str, str]:
        """The `cluster` field of an operation's events (none when the run has one cluster)."""
        return {"cluster": cluster} if cluster else {}

    @property
    def _tombstones(self) -> bool:
        """Whether appends may be tombstones: a --lifecycle run's, untyped (a record is never empty)."""
        return self.config.lifecycle and not self.schema.typed

    def _append(
        self,
        session: Session,
        process: int,
        cluster: str,
        topic: str,
        value: str,
        key: str | None = None,
        tombstone: bool = False,
    ) -> str:
        fields = self._where(cluster) | ({"key": key} if key else {}) | ({"tombstone": True} if tombstone else {})
        self.history.invoke(process, "append", topic, value=value, **fields)
        outcome = session.append(topic, value, key, tombstone)
        self.history.complete(process, outcome.kind, "append", topic, value=value, **fields, **outcome.fields)
        if outcome.kind == "ok":
            self._remember(cluster, topic, [outcome.fields["position"]])
        return outcome.kind

    def _read(self, session: Session, process: int, cluster: str, topic: str, rng: random.Random) -> str:
        start = self._recent_position(cluster, topic, rng) if rng.random() < 0.5 else None
        limit = rng.randint(1, self.config.max_limit) if rng.random() < 0.3 else None
        fields: dict[str, object] = {"from": start, **self._where(cluster)}
        if limit is not None:
            fields["limit"] = limit
        self.history.invoke(process, "read", topic, **fields)
        outcome = session.read(topic, start, limit)
        self.history.complete(process, outcome.kind, "read", topic, **fields, **outcome.fields)
        if outcome.kind == "ok" and outcome.fields["value"]:
            entries = outcome.fields["value"]
            self._remember(cluster, topic, [entries[-1][0], rng.choice(entries)[0]])
        return outcome.kind

    def _final_reads(self, progress: Progress) -> dict[str, int]:
        """One successful read from the beginning per topic (per cluster, once replication caught up), retried
        (each try recorded) until it works."""
        process = self._new_process()
        session: Session | None = None
        counts: dict[str, int] = {}
        if self.config.geo:
            admins = {name: urls[1] for name, urls in self.config.clusters.items()}
            timeout_s = self.config.final_read_timeout_s
            geo.wait_replicated(admins, self.topics, self.config.credentials, timeout_s, progress)
        deadline = time.monotonic() + self.config.final_read_timeout_s
        connected_to = ""
        try:
            for cluster, topic in [(c, t) for c in self.clusters for t in self.topics if t in self.readable]:
                if session is not None and cluster != connected_to:
                    session.close()
                    session = None
                fields: dict[str, object] = {"from": None, "final": True, **self._where(cluster)}
                while True:
                    if session is None:
                        session, connected_to = self._connect(cluster), cluster
                    self.history.invoke(process, "read", topic, **fields, **self._lifecycle_fields(topic))
                    outcome = session.read(topic, None, None)
                    self.history.complete(process, outcome.kind, "read", topic, **fields, **outcome.fields)
                    if outcome.kind == "ok":
                        counts[f"{topic} @{cluster}" if cluster else topic] = len(outcome.fields["value"])
                        break
                    if time.monotonic() > deadline:
                        raise WorkloadError(
                            f"the final read of {topic}{' in ' + cluster if cluster else ''} kept failing for "
                            f"{self.config.final_read_timeout_s:.0f}s "
                            f"(last: {outcome.fields.get('error')}); the cluster did not recover"
                        )
                    session.close()
                    session = None
                    time.sleep(1.0)
        finally:
            if session is not None:
                session.close()
        shown = ", ".join(f"{t.rsplit('/', 1)[-1]}={c}" for t, c in counts.items())
        progress(f"final reads: {shown or 'none (no persistent topic)'}")
        return counts

    def _lifecycle_fields(self, topic: str) -> dict[str, object]:
        """Of a final read's invoke in a --lifecycle run: the namespace's policies (`lifecycle`), and the ledgers
        the topic's list recorded as offloaded just before the read (`offloaded`; absent when its stats could not
        be read). An offloaded ledger stays so (retention is unlimited): the read goes through each of them."""
        if not self.config.lifecycle or not self.config.admin_url:
            return {}
        fields: dict[str, object] = {"lifecycle": lifecycle.policies()}
        stats = lifecycle.internal_stats(self.config.admin_url, topic, self.config.credentials)
        if stats is not None:
            fields["offloaded"] = lifecycle.offloaded_ledgers(stats)
        return fields

    def _report(self, progress: Progress) -> None:
        started = time.monotonic()
        while not self._stop.wait(2.0):
            c = self.history.counts
            fault = self.nemesis.describe() if self.nemesis else "none"
            progress(
                f"[{time.monotonic() - started:6.1f}s] ops {self._invoked}/{self.config.ops}  "
                f"ok {c['ok']}  fail {c['fail']}  info {c['info']}  fault: {fault}"
            )
