"""The nemesis: injects one fault at a time on a schedule, through impl.cluster's verbs, and heals it.

Schedule: `interval` seconds calm, then a fault chosen from the enabled kinds (at random, or in turn
with `cycle=True` so that a short run is sure to see every kind), in a node chosen at random among
those it can hit (a broker only if it owns a bundle, when some broker does), held for
`interval` seconds, then healed; repeat until stopped; `heal_all` brings every node back at the end.
Every step is an event of process "nemesis" in the history (type "info", f = the fault kind or
"heal", value = the node; a fault in a broker also lists the bundles it owned), so a reader can line
anomalies up with the faults.

Fault kinds:
  kill-bookie / kill-broker / kill-proxy / kill-standalone     SIGKILL; healed by starting it (same data, port)
  pause-bookie / pause-broker / pause-proxy / pause-standalone  SIGSTOP; healed by SIGCONT
  stall                SIGSTOP of a standalone process, broker or bookie for `stall_s` (past its metadata session
                       timeout, so the session expires), then SIGCONT at once; the heal does not restart it: it
                       checks the node registered again by itself (issue 49), and says so in the history
  expire-session       ZooKeeper ends a bookie's or broker's session; healed by restarting the node
                       if it did not register again by itself
  restart-zookeeper    SIGKILL one ZooKeeper server; healed by starting it again (same data)
  kill-brokers / pause-brokers   on an instance (several clusters): every broker of one cluster at once

On an instance, nodes are named <cluster>/<node> (impl/workload/geo.py).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from impl.cluster.deployment import Cluster, ClusterError, InProcessNode
from impl.metadata.url import DEFAULT_SESSION_TIMEOUT_S
from impl.workload.geo import InstanceNodes
from impl.workload.history import HistoryWriter

FAULT_ROLES = {
    "kill-bookie": ("bookie",),
    "pause-bookie": ("bookie",),
    "kill-broker": ("broker",),
    "pause-broker": ("broker",),
    "expire-session": ("bookie", "broker"),
    "restart-zookeeper": ("zookeeper",),
    "kill-proxy": ("proxy",),
    "pause-proxy": ("proxy",),
    "kill-standalone": ("standalone",),
    "pause-standalone": ("standalone",),
    "stall": ("standalone", "broker", "bookie"),
    # An instance's (impl/workload/geo.py): every broker of one cluster at once, so the other clusters'
    # replicators find no remote to send to.
    "kill-brokers": ("brokers",),
    "pause-brokers": ("brokers",),
}
FAULTS = tuple(FAULT_ROLES)
# How long a heal keeps trying to start a crashed node (ZooKeeper's and the embedded store's sessions time out
# after 10 s by default; until then a restarted node may find its old registration and refuse to start).
RESTART_PATIENCE_S = 30.0
# A stall outlasts the metadata session timeout (impl.metadata.url's default, 10 s) by this much, so the session
# certainly expires (the store's server, or another session's reaper, notices it while the node is stopped).
STALL_MARGIN_S = 5.0
DEFAULT_STALL_S = DEFAULT_SESSION_TIMEOUT_S + STALL_MARGIN_S
# After SIGCONT, how long a stalled node has to register again by itself before its heal says it did not.
STALL_RECOVERY_S = 30.0


class NemesisError(Exception):
    """The requested faults cannot be injected into this cluster; the message says why."""


@dataclass
class ActiveFault:
    kind: str
    node: str
    since: float


class Nemesis:
    def __init__(
        self,
        cluster: Cluster | InstanceNodes,
        faults: list[str],
        interval_s: float,
        history: HistoryWriter,
        seed: int | None = None,
        cycle: bool = False,
        max_faults: int = 0,
        stall_s: float = DEFAULT_STALL_S,
    ) -> None:
        for kind in faults:
            if kind not in FAULT_ROLES:
                raise NemesisError(f"unknown fault {kind!r}; choose from {', '.join(FAULTS)}")
            if not self._targets(cluster, kind):
                raise NemesisError(
                    f"fault {kind} needs a {' or '.join(FAULT_ROLES[kind])} node, and the {cluster.topology} "
                    f"in {cluster.directory} has none"
                )
        self.cluster = cluster
        self.faults = faults
        self.interval_s = interval_s
        self.history = history
        self.rng = random.Random(seed)
        self.cycle = cycle
        self.max_faults = max_faults  # 0 = no limit
        self.stall_s = stall_s
        self.active: ActiveFault | None = None
        self.injected = 0
        self.injected_or_tried = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._lock = threading.Lock()  # one cluster verb at a time (the schedule vs. heal_all)
        self._broken: set[str] = set()  # nodes a heal could not bring back; retried by heal_all

    @staticmethod
    def _targets(cluster: Cluster | InstanceNodes, kind: str, running: bool = False) -> list[str]:
        """Nodes this fault can hit (only running ones if `running`)."""
        nodes = [n for n in cluster.nodes() if n.role in FAULT_ROLES[kind]]
        if (
            kind.startswith("pause-") or kind == "stall"
        ):  # a signal stops a whole process, not a bookie inside standalone
            nodes = [n for n in nodes if not isinstance(n, InProcessNode)]
        if kind == "expire-session":
            nodes = [n for n in nodes if cluster.can_expire(n)]
        if running:
            nodes = [n for n in nodes if n.pid() is not None and not n.paused()]
        return [n.name for n in nodes]

    def start(self) -> None:
        if self.faults:
            self._thread.start()

    def describe(self) -> str:
        fault = self.active
        return "none" if fault is None else f"{fault.kind} {fault.node} ({time.monotonic() - fault.since:.0f}s)"

    def _run(self) -> None:
        try:
            self._schedule()
        except Exception as e:  # the schedule must not die silently: say so in the history, heal_all still runs
            self.history.nemesis("stopped", "-", error=f"{type(e).__name__}: {e}")

    def _schedule(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.max_faults and self.injected_or_tried >= self.max_faults:
                with self._lock:
                    self._repair()
                continue
            self._inject()
            if self._stop.wait(self.interval_s):
                break
            self._heal()

    def _inject(self) -> None:
        with self._lock:
            self._repair()
            kind = (
                self.faults[self.injected_or_tried % len(self.faults)] if self.cycle else self.rng.choice(self.faults)
            )
            self.injected_or_tried += 1
            targets, owned = self._worth_hitting(self._targets(self.cluster, kind, running=True))
            if not targets:
                self.history.nemesis(kind, "-", error="no running node to inject it into")
                return
            node = self.rng.choice(targets)
            try:
                detail = self._apply(kind, node)
            except ClusterError as e:
                self.history.nemesis(kind, node, error=str(e).splitlines()[0])
                return
            self.active = ActiveFault(kind, node, time.monotonic())
            self.injected += 1
            extra = {"bundles": owned[node]} if node in owned else {}
            self.history.nemesis(kind, node, detail=detail, **extra)

    def _worth_hitting(self, targets: list[str]) -> tuple[list[str], dict[str, list[str]]]:
        """The targets, less the brokers that own no bundle when some broker does (a fault in a broker that
        serves no topic moves nothing, so a short run could pass without a single takeover); and the
        bundles each broker target owns, as far as known."""
        brokers = [name for name in targets if self.cluster.node(name).role == "broker"]
        owned = self.cluster.bundles_owned(brokers) if brokers else None
        if not owned or not any(owned.values()):  # unknown (no ZooKeeper, or unreadable), or nothing owned yet
            return targets, owned or {}
        return [name for name in targets if name not in brokers or owned[name]], owned

    def _apply(self, kind: str, node: str) -> str:
        if isinstance(self.cluster.node(node), InProcessNode):
            if kind == "expire-session":
                self.cluster.expire_session(node)
                return "metadata session expired (inside standalone)"
            self.cluster.kill(node)
            return "stopped without a clean shutdown, inside standalone"
        if kind.startswith("kill-"):
            return f"SIGKILL pid {self.cluster.kill(node)}"
        if kind.startswith("pause-"):
            return f"SIGSTOP pid {self.cluster.pause(node)}"
        if kind == "stall":
            pid = self.cluster.pause(node)
            try:
                self._stop.wait(self.stall_s)  # held under the lock: nothing else may heal it early
            finally:
                self.cluster.resume(node)
            return f"SIGSTOP pid {pid} for {self.stall_s:g} s (past the metadata session timeout), then SIGCONT"
        if kind == "expire-session":
            return f"ZooKeeper session 0x{self.cluster.expire_session(node):x} ended"
        if kind == "restart-zookeeper":
            return f"SIGKILL pid {self.cluster.kill(node)}"
        raise NemesisError(f"unknown fault {kind!r}")

    def _heal(self) -> None:
        with self._lock:
            fault, self.active = self.active, None
            if fault is None:
                return
            try:
                detail = self._undo(fault)
            except ClusterError as e:
                self._broken.add(fault.node)
                self.history.nemesis("heal", fault.node, fault=fault.kind, error=str(e).splitlines()[0])
                return
            self.history.nemesis("heal", fault.node, fault=fault.kind, detail=detail)

    def _repair(self) -> None:
        """Retry bringing back the nodes an earlier heal could not, before anything new is broken."""
        for name in sorted(self._broken):
            try:
                detail = self._bring_back(name)
            except ClusterError as e:
                self.history.nemesis("heal", name, error=str(e).splitlines()[0])
                continue
            self._broken.discard(name)
            self.history.nemesis("heal", name, detail=detail)

    def _bring_back(self, name: str) -> str:
        """Start a node that is down; for a node inside standalone whose in-place start fails, restart the
        whole standalone process (its data and ports are kept)."""
        node = self.cluster.node(name)
        if node.pid() is not None and not node.paused():
            return "already running"
        if isinstance(node, InProcessNode):
            try:
                self.cluster.start(name)
                return f"started again in place, pid {node.host.pid()}"
            except ClusterError as e:
                first = str(e).splitlines()[0]
                self.cluster.node(node.host.name).kill()
                return f"in-place start failed ({first}); {self._start_patiently(node.host.name)}"
        return self._start_patiently(name)

    def _start_patiently(self, name: str) -> str:
        """Start a node, retrying for a while: a crashed node may refuse to start until its old metadata
        session has expired (its registration is still there), as a supervisor would keep trying."""
        deadline = time.monotonic() + RESTART_PATIENCE_S
        attempts = 0
        while True:
            attempts += 1
            try:
                self.cluster.start(name)
                return f"started again, pid {self.cluster.node(name).pid()} (attempt {attempts})"
            except ClusterError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def _undo(self, fault: ActiveFault) -> str:
        if fault.kind == "stall":
            return self._recovered_from_stall(fault.node)
        if fault.kind.startswith("pause-"):
            return f"SIGCONT pid {self.cluster.resume(fault.node)}"
        if fault.kind == "expire-session":
            if self.cluster.registered(fault.node):
                return "the node registered again by itself"
            self.cluster.restart(fault.node)
            return f"restarted (it did not register again by itself), pid {self.cluster.node(fault.node).pid()}"
        return self._bring_back(fault.node)

    def _recovered_from_stall(self, name: str) -> str:
        """The stalled node was resumed at once; it must have registered again by itself (a new session).
        Raises ClusterError (the heal fails, the history says so, heal_all restarts it) if it did not."""
        node = self.cluster.node(name)
        if node.role == "standalone" or not self.cluster.metadata_url.startswith("zk://"):
            return "resumed; registers again by itself (the embedded store is checked by the workload's writes)"
        deadline = time.monotonic() + STALL_RECOVERY_S
        while not self._stop.is_set():
            try:
                if self.cluster.registered(name):
                    return "resumed; registered again by itself"
            except ClusterError:
                pass  # ZooKeeper busy: ask again
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        raise ClusterError(f"{name} did not register again by itself within {STALL_RECOVERY_S:g} s of SIGCONT")

    def _unregistered(self, name: str) -> bool:
        node = self.cluster.node(name)
        if node.role not in ("bookie", "broker") or not self.cluster.metadata_url.startswith("zk://"):
            return False
        if node.pid() is None or node.paused():
            return False
        try:
            return not self.cluster.registered(name)
        except ClusterError:
            return False  # ZooKeeper unreachable: it is the sick one, and is healed on its own

    def heal_all(self, timeout_s: float = 120.0) -> list[str]:
        """Stop the schedule, undo the active fault, and bring every node that is down or paused back.

        Returns the nodes that could not be healed (empty when the cluster is whole again).
        """
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._heal()
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                sick = [n for n in self.cluster.nodes() if n.pid() is None or n.paused() or self._unregistered(n.name)]
                for node in sick:
                    try:
                        if node.paused():
                            detail = f"SIGCONT pid {self.cluster.resume(node.name)}"
                        elif node.pid() is not None:  # alive, but its session expired and it did not register again
                            self.cluster.restart(node.name)
                            detail = f"restarted (not registered), pid {node.pid()}"
                        else:
                            detail = self._bring_back(node.name)
                        self.history.nemesis("heal", node.name, detail=detail)
                    except ClusterError as e:
                        self.history.nemesis("heal", node.name, error=str(e).splitlines()[0])
                remaining = [
                    n.name for n in self.cluster.nodes() if n.pid() is None or n.paused() or self._unregistered(n.name)
                ]
            if not remaining or time.monotonic() > deadline:
                return remaining
            time.sleep(1.0)
