"""A reference cluster in one directory: real ZooKeeper, bookie and broker processes on 127.0.0.1.

Layout of the directory D:
    cluster.json            the state: metadata URL, service URLs, and per node its role, port
                            (a broker's is its web port, which is its identity), directory,
                            command and pid (rewritten after every verb)
    zookeeper/zk-N/         ZooKeeper servers (impl.metadata.zkserver's launcher and layout)
    bookie-N/               node.log, node.pid, data/ (journal, entry logs)
    broker-N/               node.log, node.pid
    standalone-1/           (standalone topology) node.log, node.pid, data/

cluster.json is written *before* anything is launched and every node is found again through its
pidfile, so `down` stops everything also after a failed or interrupted `up`, from any process.
Nodes are started in dependency order (ZooKeeper, bookies, brokers) and `up` returns only when
every node is healthy; if one fails, everything launched so far is stopped again.

Fault verbs: kill (SIGKILL), pause/resume (SIGSTOP/SIGCONT), start, restart (kill -9, then start
with the same data directory and port) and expire-session (impl.cluster.sessions). A killed bookie
or broker still holds its ZooKeeper registration until its session times out, and our nodes refuse
to start while it exists; `start` therefore ends a dead node's orphaned session first.

The standalone topology is one `pulsar-ref standalone` process; the bookies and the broker inside
it appear as `InProcessNode`s (bookie-0.., broker) whose kill/start/expire-session go through the
standalone's control endpoint. Signals can only pause the whole process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from impl.broker.namespaces import DEFAULT_CLUSTER, AdminError, ClusterData, register_cluster
from impl.cluster.nodes import Node, NodeError, pulsar_ref_command
from impl.cluster.sessions import SessionExpiryError, ZooKeeperAdmin, expire_node_session
from impl.metadata.naming import InvalidNamespaceName, check_named_entity
from impl.metadata.zkserver import ZooKeeperEnsemble, ZooKeeperError, ZooKeeperServer, free_port
from impl.security.secure_setup import SUPER_USER, ensure_secure_files

STATE_FILE = "cluster.json"
CHROOT = "/pulsar-ref"
CONFIGURATION_CHROOT = "/pulsar-ref-configuration"  # an instance's configuration store, in its own ZooKeeper
ROLES = ("zookeeper", "bookie", "broker", "proxy", "standalone")
Progress = Callable[[str], None]


class ClusterError(Exception):
    """The cluster could not be started, found or changed; the message says what to do."""


def _tls_service(nodes: list[dict[str, Any]], role: str) -> str | None:
    """The pulsar+ssl:// service URL of a secure cluster's brokers or proxies (None: there are none)."""
    ports = [n["tls_port"] for n in nodes if n["role"] == role and "tls_port" in n]
    return "pulsar+ssl://" + ",".join(f"127.0.0.1:{p}" for p in ports) if ports else None


def _quiet(_: str) -> None:
    pass


def wait_exec(server: ZooKeeperServer, timeout_s: float = 15.0) -> None:
    """Wait until a just-launched server's process runs java (has exec'd).

    ZooKeeperServer.pid() recognises its JVM by the command line; between fork and exec the child
    still shows ours, so a health check at that moment would take a starting server for a dead one.
    """
    try:
        pid = int(server.pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE or str(server.config_file) in process.cmdline():
                return
        except psutil.Error:
            return
        time.sleep(0.02)


class ZooKeeperNode:
    """A ZooKeeper server seen through the same verbs as a `Node`."""

    role = "zookeeper"

    def __init__(self, server: ZooKeeperServer) -> None:
        self.server = server
        self.name = f"zk-{server.server_id}"
        self.port = server.client_port
        self.directory = server.directory
        self.log_file = server.log_file

    @property
    def address(self) -> str:
        return self.server.connect_string

    def pid(self) -> int | None:
        return self.server.pid()

    def paused(self) -> bool:
        pid = self.pid()
        try:
            return pid is not None and psutil.Process(pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            return False

    def healthy(self) -> bool:
        return self.server.mode() is not None

    def signal(self, sig: signal.Signals) -> int:
        pid = self.pid()
        if pid is None:
            raise NodeError(f"{self.name} is not running; start it with `pulsar-ref cluster restart ... {self.name}`")
        os.kill(pid, sig)
        return pid

    def kill(self) -> int | None:
        pid = self.pid()
        self.server.kill()
        return pid

    def stop(self) -> int | None:
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        self.server.stop()
        return pid

    def start(self, timeout_s: float) -> None:
        # A lone member of an ensemble only serves once it rejoined the quorum: wait for that.
        self.server.launch()
        wait_exec(self.server)
        self.server.wait_serving(timeout_s)

    def log_tail(self, lines: int = 30) -> str:
        return self.server.log_tail(lines)


class InProcessNode:
    """A bookie or the broker inside a `pulsar-ref standalone` process, driven through its control endpoint.

    Kill and start act in place (the standalone stops a bookie's server or the broker without a
    clean shutdown, and starts it again); pause and expire-session of a bookie are impossible in
    one process (bookies share its metadata session), so only the whole process can be paused.
    """

    def __init__(self, name: str, role: str, host: Node, address: str = "127.0.0.1:0", up: bool = False) -> None:
        self.name = name
        self.role = role
        self.host = host
        self.directory = host.directory
        self.log_file = host.log_file
        self.port = int(address.rsplit(":", 1)[1])
        self._up = up

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _control_port(self) -> int | None:
        try:
            return int(json.loads((self.host.directory / "data" / "standalone.json").read_text())["control_port"])
        except (OSError, ValueError, KeyError):
            return None

    def _control(self, verb: str, node: str = "") -> Any:
        """`status`, or a fault verb on `node`, through the standalone's control endpoint (HTTP)."""
        from impl.web.client import Unreachable, call
        from impl.web.http import HttpError

        port = self._control_port()
        if port is None or self.host.pid() is None or self.host.paused():
            raise NodeError(f"{self.host.name} is not running (or paused); its {self.name} cannot be reached")
        base = f"http://127.0.0.1:{port}"
        # A `--secure` standalone's control endpoint wants the admin token it made (impl/security/secure_setup.py).
        token_file = self.host.directory / "data" / "security" / "admin.token"
        headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"} if token_file.exists() else None
        try:
            if verb == "status":
                return call("GET", f"{base}/status", timeout_s=30, headers=headers)
            return call("POST", f"{base}/{verb}/{node}", timeout_s=30, headers=headers)
        except Unreachable as e:
            raise NodeError(f"the control endpoint of {self.host.name} failed: {e}") from None
        except HttpError as e:
            raise NodeError(f"{self.host.name} refused `{verb} {node}`: {e.reason}") from None

    def _status(self) -> list[dict[str, Any]]:
        try:
            return list(self._control("status"))
        except NodeError:
            return []

    def pid(self) -> int | None:
        return self.host.pid() if self._up else None

    def paused(self) -> bool:
        return self.host.paused()

    def healthy(self) -> bool:
        return self._up and self.host.healthy()

    def signal(self, sig: signal.Signals) -> int:
        raise NodeError(f"{self.name} runs inside {self.host.name}: only the whole process can be paused")

    def kill(self) -> int | None:
        if not self._up:
            return None
        self._control("kill", self.name)
        self._up = False
        return self.host.pid()

    def stop(self) -> int | None:
        return None  # stopping the standalone process stops it

    def start(self, timeout_s: float) -> None:
        self._control("start", self.name)
        self._up = True

    def log_tail(self, lines: int = 30) -> str:
        return self.host.log_tail(lines)


AnyNode = Node | ZooKeeperNode | InProcessNode


@dataclass(frozen=True)
class NodeStatus:
    name: str
    role: str
    state: str  # up, paused, not serving, down
    pid: int | None
    port: int
    details: str
    node_id: str = "-"  # a bookie's bookie id (as in ledger ensembles), a broker's id; "-" for ZooKeeper


def offload_options(offload: dict[str, Any]) -> list[str]:
    """The `pulsar-ref broker` options of an offloader: `driver` (filesystem, aws-s3 or S3) with `directory`
    (filesystem) or `bucket` and optionally `endpoint` and `region` (S3), and optionally `deletion_lag_ms`."""
    options = ["--offload-driver", str(offload["driver"])]
    if offload["driver"] == "filesystem":
        options += ["--offload-dir", str(offload["directory"])]
    else:
        options += ["--s3-offload-bucket", str(offload["bucket"])]
        for key in ("endpoint", "region"):
            if offload.get(key):
                options += [f"--s3-offload-{key}", str(offload[key])]
    if offload.get("deletion_lag_ms") is not None:
        options += ["--offload-deletion-lag-ms", str(offload["deletion_lag_ms"])]
    return options


def describe_offload(offload: dict[str, Any] | None) -> str:
    """One line on a cluster's tiered storage, for `status`."""
    if not offload:
        return "none (brokers without an offloader)"
    if offload["driver"] == "filesystem":
        where = f"filesystem in {offload['directory']}"
    else:
        endpoint = f" at {offload['endpoint']}" if offload.get("endpoint") else ""
        region = f" ({offload['region']})" if offload.get("region") else ""
        where = f"{offload['driver']} bucket {offload['bucket']}{endpoint}{region}"
    lag = offload.get("deletion_lag_ms")
    return f"{where}; bookie copies deleted {'the broker default, 4 h' if lag is None else f'{lag} ms'} after"


class Cluster:
    """The cluster described by D/cluster.json (see the module docstring)."""

    def __init__(self, directory: Path, state: dict[str, Any], die_with_parent: bool = False) -> None:
        self.directory = directory
        self.state = state
        self.die_with_parent = die_with_parent

    # --- creating and loading ------------------------------------------------------------

    @classmethod
    def plan(
        cls,
        directory: str | Path,
        zookeepers: int = 1,
        bookies: int = 3,
        brokers: int = 2,
        base_port: int = 0,
        proxies: int = 0,
        die_with_parent: bool = False,
        broker_options: tuple[str, ...] = (),
        bookie_options: tuple[str, ...] = (),
        trace_dir: str | Path | None = None,
        secure: bool = False,
        name: str = DEFAULT_CLUSTER,
        configuration_store: str | None = None,
        auth_refresh_check_s: float | None = None,
        offload: dict[str, Any] | None = None,
    ) -> Cluster:
        """Lay out a new multi-process cluster in `directory` (ports chosen now, fixed for its lifetime).

        `trace_dir`: every bookie and broker appends its protocol events (`--trace`) to
        TRACE_DIR/<node>.trace.jsonl (a restart continues its file), and TRACE_DIR/nodes.json names
        each node's address, for trace validation (conformance/cluster_traces.py).

        `secure`: brokers and proxies with token authentication, authorization and TLS, from files made
        in DIRECTORY/security (impl/security/secure_setup.py); clients need its token and CA.
        `auth_refresh_check_s`: how often their connections re-check a token's expiry (None: their default).

        `name`: the cluster's name in its Pulsar instance; `configuration_store`: the instance's
        configuration store URL (docs/geo-replication.md), None for the cluster's own ZooKeeper.

        `offload`: tiered storage for every broker (see `offload_options`); a filesystem offloader without
        a `directory` gets DIRECTORY/offload, made now, one directory all brokers share."""
        directory = Path(directory).resolve()
        cls._refuse_reuse(directory)
        try:
            check_named_entity("cluster", name)
        except InvalidNamespaceName as e:
            raise ClusterError(str(e)) from None
        if zookeepers not in (1, 3):
            raise ClusterError(f"--zookeepers must be 1 or 3, not {zookeepers}")
        if bookies < 1 or brokers < 0:
            raise ClusterError(f"need at least 1 bookie and 0 or more brokers, not {bookies} and {brokers}")
        if proxies < 0 or (proxies and not brokers):
            raise ClusterError(f"proxies need brokers behind them: {proxies} proxies, {brokers} brokers")
        if offload is not None:
            offload = dict(offload)
            if offload["driver"] == "filesystem" and not offload.get("directory"):
                offload["directory"] = str(directory / "offload")
                Path(offload["directory"]).mkdir(parents=True, exist_ok=True)
            broker_options = (*broker_options, *offload_options(offload))
        ports = iter(range(base_port, base_port + 1000)) if base_port else None

        def port() -> int:
            return next(ports) if ports is not None else free_port()

        ensemble = ZooKeeperEnsemble(directory / "zookeeper", zookeepers, base_port or None)
        if ports is not None:
            for _ in range(zookeepers):
                next(ports)
        metadata = f"zk://{ensemble.connect_string}{CHROOT}"
        instance = ["--cluster", name] + (["--configuration-store", configuration_store] if configuration_store else [])
        nodes: list[dict[str, Any]] = []
        traces = Path(trace_dir).resolve() if trace_dir is not None else None
        files = ensure_secure_files(directory / "security") if secure else None

        def security(server: str, node: dict[str, Any]) -> list[str]:
            """The security options of a broker or proxy of a secure cluster; its TLS ports go in `node`."""
            if files is None:
                return []
            node["tls_port"], node["web_tls_port"] = port(), port()
            tls = ["--tls-port", str(node["tls_port"]), "--web-tls-port", str(node["web_tls_port"])]
            tls += ["--tls-cert-file", str(files.tls.cert_file), "--tls-key-file", str(files.tls.key_file)]
            auth = ["--authentication-enabled", "--token-secret-key", str(files.secret_key)]
            if auth_refresh_check_s is not None:
                auth += ["--authentication-refresh-check-seconds", str(auth_refresh_check_s)]
            if server == "broker":
                auth += ["--authorization-enabled", "--super-user-roles", SUPER_USER]
            return auth + tls

        def traced(name: str) -> list[str]:
            if traces is None:
                return []
            # A traced bookie never checkpoints during a run: a restart replays its whole journal, and the
            # replayed records are the state trace validation checks the crash kept.
            never = ["--checkpoint-interval", "86400"] if name.startswith("bookie-") else []
            return ["--trace", str(traces / f"{name}.trace.jsonl"), *never]

        for i in range(1, bookies + 1):
            p, d = port(), directory / f"bookie-{i}"
            command = pulsar_ref_command("bookie", "--metadata", metadata, "--data", str(d / "data"), "--port", str(p))
            command += [*bookie_options, *traced(f"bookie-{i}")]
            nodes.append({"name": f"bookie-{i}", "role": "bookie", "port": p, "dir": str(d), "command": command})
        for i in range(1, brokers + 1):
            pp, wp, d = port(), port(), directory / f"broker-{i}"
            command = pulsar_ref_command(
                "broker", "--metadata", metadata, "--port", str(pp), "--web-port", str(wp), *instance, *broker_options
            )
            # A broker's "port" is its web port: 127.0.0.1:web_port is its identity (registration,
            # ownership nodes), and its web service answers health checks.
            node: dict[str, Any] = {"name": f"broker-{i}", "role": "broker", "port": wp, "pulsar_port": pp}
            node |= {"web_port": wp, "dir": str(d)}
            node["command"] = command + security("broker", node) + traced(f"broker-{i}")
            nodes.append(node)
        for i in range(1, proxies + 1):
            p, wp = port(), port()
            command = pulsar_ref_command("proxy", "--metadata", metadata, "--port", str(p), "--web-port", str(wp))
            node = {"name": f"proxy-{i}", "role": "proxy", "port": p, "web_port": wp}
            node["dir"] = str(directory / f"proxy-{i}")
            node["command"] = command + security("proxy", node)
            nodes.append(node)
        proxy_ports = [n["port"] for n in nodes if n["role"] == "proxy"]
        pulsar_ports = [n["pulsar_port"] for n in nodes if n["role"] == "broker"]
        web_ports = [n["web_port"] for n in nodes if n["role"] == "broker"]
        state: dict[str, Any] = {
            "topology": "cluster",
            "name": name,
            "metadata": metadata,
            "configuration_store": configuration_store or metadata,
            # Pulsar's own clients: every broker's pulsar:// listener, as Pulsar's multi-host service URL
            "pulsar_service": "pulsar://" + ",".join(f"127.0.0.1:{p}" for p in pulsar_ports) if pulsar_ports else None,
            # the brokers' web services (admin REST API, HTTP lookups, /metrics, the cluster view)
            "web_services": [f"http://127.0.0.1:{p}" for p in web_ports],
            # the proxies: when there are any, clients use them (the service URL) rather than the brokers
            "proxy_service": "pulsar://" + ",".join(f"127.0.0.1:{p}" for p in proxy_ports) if proxy_ports else None,
            "zookeepers": [
                {"name": f"zk-{s.server_id}", "role": "zookeeper", "port": s.client_port, "dir": str(s.directory)}
                for s in ensemble.servers
            ],
            "nodes": nodes,
        }
        if offload is not None:
            state["offload"] = offload
        if files is not None:
            state["security"] = {
                "super_user_token": str(files.super_user_token),
                "trust_certs_file": str(files.tls.trust_certs_file),
                "pulsar_service_tls": _tls_service(nodes, "proxy") or _tls_service(nodes, "broker"),
            }
        if traces is not None:
            traces.mkdir(parents=True, exist_ok=True)
            addresses = {n["name"]: f"127.0.0.1:{n['port']}" for n in nodes}
            (traces / "nodes.json").write_text(json.dumps(addresses, indent=2) + "\n")
            state["trace_dir"] = str(traces)
        cluster = cls(directory, state, die_with_parent)
        for server in ensemble.servers:
            server.write_config()  # so that `down` finds the servers even if `up` never got to launch them
        cluster.save()
        return cluster

    @classmethod
    def plan_configuration_store(cls, directory: str | Path, die_with_parent: bool = False) -> Cluster:
        """An instance's configuration store alone: one ZooKeeper server, no bookies or brokers
        (impl/cluster/instance.py starts it before the clusters that share it)."""
        directory = Path(directory).resolve()
        cls._refuse_reuse(directory)
        ensemble = ZooKeeperEnsemble(directory / "zookeeper", 1)
        state: dict[str, Any] = {
            "topology": "configuration-store",
            "metadata": f"zk://{ensemble.connect_string}{CONFIGURATION_CHROOT}",
            "web_services": [],
            "zookeepers": [
                {"name": f"zk-{s.server_id}", "role": "zookeeper", "port": s.client_port, "dir": str(s.directory)}
                for s in ensemble.servers
            ],
            "nodes": [],
        }
        cluster = cls(directory, state, die_with_parent)
        for server in ensemble.servers:
            server.write_config()
        cluster.save()
        return cluster

    @classmethod
    def plan_standalone(
        cls, directory: str | Path, port: int = 0, die_with_parent: bool = False, options: Sequence[str] = ()
    ) -> Cluster:
        """One `pulsar-ref standalone` process (embedded metadata, bookies and a broker inside); `options` are
        more of its command-line options (e.g. `--max-entries-per-ledger 20`)."""
        directory = Path(directory).resolve()
        cls._refuse_reuse(directory)
        pp, wp, d = port or free_port(), free_port(), directory / "standalone-1"
        command = pulsar_ref_command(
            "standalone", "--data", str(d / "data"), "--port", str(pp), "--web-port", str(wp), *options
        )
        state = {
            "topology": "standalone",
            "metadata": f"embedded://{d / 'data' / 'metadata'}",  # where impl.broker.standalone keeps it
            "pulsar_service": f"pulsar://127.0.0.1:{pp}",
            "web_services": [f"http://127.0.0.1:{wp}"],
            "zookeepers": [],
            "nodes": [{"name": "standalone-1", "role": "standalone", "port": pp, "dir": str(d), "command": command}],
        }
        cluster = cls(directory, state, die_with_parent)
        cluster.save()
        return cluster

    @staticmethod
    def _refuse_reuse(directory: Path) -> None:
        if (directory / STATE_FILE).exists():
            existing = Cluster.load(directory)
            running = [n.name for n in existing.nodes() if n.pid() is not None]
            if running:
                raise ClusterError(
                    f"a cluster is already running in {directory} ({', '.join(running)}); "
                    f"stop it first: pulsar-ref cluster down --dir {directory}"
                )
            raise ClusterError(
                f"{directory} already holds a stopped cluster; start a new one in an empty --dir "
                f"(or remove {directory})"
            )

    @classmethod
    def load(cls, directory: str | Path) -> Cluster:
        directory = Path(directory).resolve()
        try:
            state = json.loads((directory / STATE_FILE).read_text())
        except FileNotFoundError:
            raise ClusterError(
                f"no cluster in {directory} (no {STATE_FILE}); start one with: pulsar-ref cluster up --dir {directory}"
            ) from None
        except (OSError, ValueError) as e:
            raise ClusterError(f"cannot read {directory / STATE_FILE}: {e}") from None
        return cls(directory, state)

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for entry in self.state["zookeepers"] + self.state["nodes"]:
            entry["pid"] = self.node(entry["name"]).pid()
        tmp = self.directory / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        tmp.replace(self.directory / STATE_FILE)

    # --- nodes -----------------------------------------------------------------------------

    @property
    def metadata_url(self) -> str:
        return str(self.state["metadata"])

    @property
    def pulsar_service_url(self) -> str | None:
        """Where Pulsar's clients connect: the proxies when the cluster has some, else every broker's
        pulsar:// listener."""
        service = self.state.get("proxy_service") or self.state.get("pulsar_service")
        return str(service) if service else None

    @property
    def security(self) -> dict[str, str] | None:
        """A secure cluster's `super_user_token` and `trust_certs_file` paths and `pulsar_service_tls`."""
        security = self.state.get("security")
        return dict(security) if security else None

    def credentials(self) -> tuple[str | None, str | None]:
        """(the super-user's token, the CA file) of a secure cluster; (None, None) otherwise."""
        if not self.security:
            return None, None
        return Path(self.security["super_user_token"]).read_text().strip(), self.security["trust_certs_file"]

    @property
    def broker_service_url(self) -> str | None:
        """Every broker's pulsar:// listener, bypassing the proxies."""
        service = self.state.get("pulsar_service")
        return str(service) if service else None

    @property
    def web_service_urls(self) -> list[str]:
        """Every broker's web service: admin REST API, HTTP lookups, /metrics, the cluster view."""
        return [str(url) for url in self.state.get("web_services", [])]

    @property
    def admin_url(self) -> str | None:
        """Every broker's web service as one admin URL: http://HOST:PORT[,HOST:PORT...]."""
        urls = self.web_service_urls
        return "http://" + ",".join(u.removeprefix("http://") for u in urls) if urls else None

    @property
    def offload(self) -> dict[str, Any] | None:
        """The brokers' tiered storage as given to `plan` (None: no offloader)."""
        offload = self.state.get("offload")
        return dict(offload) if offload else None

    @property
    def name(self) -> str:
        """The cluster's name in its Pulsar instance."""
        return str(self.state.get("name", DEFAULT_CLUSTER))

    @property
    def configuration_store_url(self) -> str:
        """The instance's configuration store (clusters, tenants, namespaces): the metadata store by default."""
        return str(self.state.get("configuration_store") or self.metadata_url)

    def cluster_data(self) -> ClusterData:
        """Where the cluster is served, as its ClusterData: every broker's web service and pulsar:// listener."""
        brokers = [n for n in self.state["nodes"] if n["role"] == "broker"]

        def urls(scheme: str, key: str) -> str:
            ports = [n[key] for n in brokers if key in n]
            return f"{scheme}://" + ",".join(f"127.0.0.1:{p}" for p in ports) if ports else ""

        return ClusterData(
            urls("http", "web_port"),
            urls("https", "web_tls_port"),
            urls("pulsar", "pulsar_port"),
            urls("pulsar+ssl", "tls_port"),
        )

    def register(self) -> bool:
        """Record the cluster's ClusterData in the configuration store unless it is known there already
        (its brokers would register only their own URLs). True when this call recorded it."""
        from impl.metadata.store import MetadataError
        from impl.metadata.url import connect

        try:
            with connect(self.configuration_store_url, session_timeout_s=10.0) as store:
                return register_cluster(store, self.name, self.cluster_data())
        except (MetadataError, AdminError, KazooException, KazooTimeoutError) as e:
            raise ClusterError(
                f"cannot register cluster {self.name!r} in the configuration store {self.configuration_store_url}: {e}"
            ) from None

    @property
    def topology(self) -> str:
        return str(self.state.get("topology", "cluster"))

    def nodes(self, role: str | None = None) -> list[AnyNode]:
        names = [e["name"] for e in self.state["zookeepers"] + self.state["nodes"]]
        found: list[AnyNode] = [self.node(n) for n in names]
        found += self.in_process_nodes()
        return [n for n in found if role is None or n.role == role]

    def in_process_nodes(self) -> list[InProcessNode]:
        """The bookies and the broker inside a running standalone process (none when it is down)."""
        hosts = [n for n in (self.node(e["name"]) for e in self.state["nodes"]) if n.role == "standalone"]
        found = []
        for host in hosts:
            if isinstance(host, Node) and host.pid() is not None and not host.paused():
                probe = InProcessNode("broker", "broker", host)
                found += [
                    InProcessNode(str(e["node"]), str(e["role"]), host, str(e["address"]), bool(e["up"]))
                    for e in probe._status()
                ]
        return found

    def node(self, name: str) -> AnyNode:
        for entry in self.state["zookeepers"]:
            if entry["name"] == name:
                from impl.metadata.zkserver import server_from_directory

                server = server_from_directory(entry["dir"])
                server.die_with_parent = self.die_with_parent
                return ZooKeeperNode(server)
        for entry in self.state["nodes"]:
            if entry["name"] == name:
                return Node(
                    entry["name"],
                    entry["role"],
                    int(entry["port"]),
                    Path(entry["dir"]),
                    list(entry["command"]),
                    self.die_with_parent,
                )
        for in_process in self.in_process_nodes():
            if in_process.name == name:
                return in_process
        names = ", ".join(n.name for n in self.nodes())
        raise ClusterError(f"no node {name!r} in the cluster in {self.directory}; its nodes are: {names}")

    # --- lifecycle -------------------------------------------------------------------------

    def up(self, timeout_s: float = 90.0, progress: Progress = _quiet) -> None:
        """Start every node in dependency order and wait until all are healthy; on failure stop everything."""
        try:
            zookeepers = self.nodes("zookeeper")
            if zookeepers:
                progress(f"starting {len(zookeepers)} ZooKeeper server(s) ...")
                ensemble = ZooKeeperEnsemble.in_directory(self.directory / "zookeeper")
                for server in ensemble.servers:
                    server.die_with_parent = self.die_with_parent
                    server.launch()
                deadline = time.monotonic() + timeout_s
                for server in ensemble.servers:
                    wait_exec(server)
                    server.wait_serving(max(1.0, deadline - time.monotonic()))
                progress(f"  ZooKeeper serving at {ensemble.connect_string}")
            for role in ("bookie", "broker", "proxy", "standalone"):
                group = [n for n in self.nodes(role) if isinstance(n, Node)]
                if not group:
                    continue
                if role == "broker" and self.register():
                    progress(f"  cluster {self.name} registered in {self.configuration_store_url}")
                progress(f"starting {len(group)} {role}(s) ...")
                offsets = [(n, n.launch()) for n in group]
                self.save()
                deadline = time.monotonic() + timeout_s
                for node, offset in offsets:
                    node.wait_listening(offset, max(1.0, deadline - time.monotonic()))
                    progress(f"  {node.name} listening on {node.address} (pid {node.pid()})")
            self.save()
        except (NodeError, ZooKeeperError, OSError) as e:
            progress("start-up failed; stopping everything launched ...")
            self.down()
            raise ClusterError(f"cluster start-up failed: {e}") from None
        except BaseException:
            self.down()
            raise

    def down(self, progress: Progress = _quiet) -> None:
        """Stop every node (proxies, then brokers, ZooKeeper last); safe at any time, also after a failed `up`."""
        order = {"proxy": 0, "broker": 1, "standalone": 1, "bookie": 2, "zookeeper": 3}
        persistent = [self.node(e["name"]) for e in self.state["zookeepers"] + self.state["nodes"]]
        for node in sorted(persistent, key=lambda n: order[n.role]):
            pid = node.stop()
            progress(f"{node.name}: {'stopped pid ' + str(pid) if pid else 'was not running'}")
        with contextlib.suppress(OSError):
            self.save()

    # --- fault verbs -----------------------------------------------------------------------

    def kill(self, name: str) -> int:
        node = self.node(name)
        try:
            pid = node.kill()
        except NodeError as e:
            raise ClusterError(str(e)) from None
        if pid is None:
            raise ClusterError(f"{name} was not running; nothing killed")
        self.save()
        return pid

    def pause(self, name: str) -> int:
        return self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> int:
        return self._signal(name, signal.SIGCONT)

    def _signal(self, name: str, sig: signal.Signals) -> int:
        try:
            return self.node(name).signal(sig)
        except NodeError as e:
            raise ClusterError(str(e)) from None

    def start(self, name: str, timeout_s: float = 60.0) -> None:
        """Start a stopped or killed node again with the same data directory and port."""
        node = self.node(name)
        try:
            if isinstance(node, ZooKeeperNode | InProcessNode):
                node.start(timeout_s)
            else:
                self._clear_stale_registration(node)
                deadline = time.monotonic() + timeout_s
                while True:
                    offset = node.launch()
                    try:
                        node.wait_listening(offset, max(1.0, deadline - time.monotonic()))
                        break
                    except NodeError:
                        # A crashed standalone finds its own old registrations in the embedded store until
                        # that session times out (~10 s) and refuses to start; we cannot end an embedded
                        # session from outside, so try again until it has.
                        if "already registered" not in node.log_since(offset) or time.monotonic() > deadline:
                            raise
                        time.sleep(1.0)
        except (NodeError, ZooKeeperError) as e:
            raise ClusterError(f"could not start {name}: {e}") from None
        finally:
            self.save()

    def _clear_stale_registration(self, node: Node) -> None:
        """End the session of a killed node that still holds its registration znode.

        A SIGKILLed node's session lives on until its timeout, and our bookie refuses to start
        while its id is still registered (BookKeeper's bookie would wait the timeout out). The
        process is certainly dead, so ending its orphaned session at once is safe and keeps
        restarts quick.
        """
        if node.role not in ("bookie", "broker") or not self.metadata_url.startswith("zk://"):
            return
        if node.pid() is not None:
            return
        try:
            with ZooKeeperAdmin(self.metadata_url) as zk:
                stale = zk.registration(node.role, node.address)
                if stale is not None:
                    zk.expire(stale.owner)
        except (SessionExpiryError, KazooException):
            pass  # ZooKeeper unreachable: the node's own start-up will report it

    def restart(self, name: str, timeout_s: float = 60.0) -> None:
        """kill -9, then start with the same data directory and port."""
        self.node(name).kill()
        self.start(name, timeout_s)

    def expire_session(self, name: str) -> int:
        """Make ZooKeeper end the node's metadata session (see impl.cluster.sessions); returns its id."""
        node = self.node(name)
        if isinstance(node, InProcessNode) and node.role == "broker":
            try:
                node._control("expire-session", node.name)
            except NodeError as e:
                raise ClusterError(str(e)) from None
            return 0
        if node.role not in ("bookie", "broker") or not self.metadata_url.startswith("zk://"):
            raise ClusterError(
                f"expire-session works on bookies and brokers of a ZooKeeper-backed cluster, not on {name} "
                f"({node.role}, metadata {self.metadata_url})"
            )
        try:
            return expire_node_session(self.metadata_url, node.role, node.address)
        except SessionExpiryError as e:
            raise ClusterError(str(e)) from None

    def can_expire(self, node: AnyNode) -> bool:
        """Whether `expire_session` works on this node."""
        if isinstance(node, InProcessNode):
            return node.role == "broker"
        return node.role in ("bookie", "broker") and self.metadata_url.startswith("zk://")

    def registered(self, name: str) -> bool:
        """Whether the bookie/broker currently holds its registration node in ZooKeeper."""
        node = self.node(name)
        if isinstance(node, InProcessNode):
            return True  # the standalone re-registers its own nodes
        try:
            with ZooKeeperAdmin(self.metadata_url) as zk:
                return zk.registration(node.role, node.address) is not None
        except (SessionExpiryError, KazooException) as e:
            raise ClusterError(f"cannot read {name}'s registration from ZooKeeper: {e}") from None

    def bundles_owned(self, brokers: list[str]) -> dict[str, list[str]] | None:
        """The bundles (tenant/namespace/range) whose ownership node each broker's ZooKeeper session holds;
        None when that cannot be known (not ZooKeeper-backed, or ZooKeeper unreadable)."""
        if not self.metadata_url.startswith("zk://"):
            return None
        try:
            with ZooKeeperAdmin(self.metadata_url, timeout_s=3.0) as zk:
                owned = {}
                for name in brokers:
                    node = self.node(name)
                    reg = zk.registration(node.role, node.address)
                    owned[name] = zk.bundles_owned_by(reg.owner) if reg is not None else []
                return owned
        except (SessionExpiryError, KazooException, KazooTimeoutError):
            return None

    # --- status ----------------------------------------------------------------------------

    def status(self) -> list[NodeStatus]:
        details = self._details()
        rows = []
        for node in self.nodes():
            pid = node.pid()
            if pid is None:
                state = "down"
            elif node.paused():
                state = "paused"
            else:
                state = "up" if node.healthy() else "not serving"
            if isinstance(node, ZooKeeperNode) and state == "up":
                mode = node.server.mode()
                details.setdefault(node.name, mode or "")
            node_id = node.address if node.role in ("bookie", "broker") else "-"
            rows.append(NodeStatus(node.name, node.role, state, pid, node.port, details.get(node.name, ""), node_id))
        return rows

    def _details(self) -> dict[str, str]:
        """Per bookie its registration and ledger count, per broker its session and bundles (best effort)."""
        if not self.metadata_url.startswith("zk://"):
            return {}
        zookeepers = self.nodes("zookeeper")
        if zookeepers and all(z.pid() is None for z in zookeepers):
            return {}  # every ZooKeeper of the cluster is down: nothing to read (and no client to time out)
        details: dict[str, str] = {}
        try:
            with ZooKeeperAdmin(self.metadata_url, timeout_s=3.0) as zk:
                ensembles = self._ledger_ensembles()
                for node in self.nodes():
                    if node.role not in ("bookie", "broker"):
                        continue
                    reg = zk.registration(node.role, node.address)
                    session = f"session 0x{reg.owner:x}" if reg else "not registered"
                    if node.role == "bookie":
                        count = sum(1 for e in ensembles if node.address in e)
                        details[node.name] = f"{session}; in the ensembles of {count} ledger(s)"
                    else:
                        bundles = zk.bundles_owned_by(reg.owner) if reg else []
                        details[node.name] = f"{session}; owns {', '.join(bundles) or 'no bundles'}"
        except Exception as e:  # status must still print the process table when ZooKeeper is down
            details["zk-1"] = f"metadata unreadable: {type(e).__name__}"
        return details

    def _ledger_ensembles(self, limit: int = 500) -> list[set[str]]:
        """The bookies of every ledger (up to `limit` ledgers), read from the ledger metadata."""
        from impl.metadata.ledger_store import LedgerMetadataStore
        from impl.metadata.url import connect

        store = connect(self.metadata_url, session_timeout_s=3.0)
        try:
            ledgers = LedgerMetadataStore(store)
            result = []
            for i, ledger_id in enumerate(ledgers.ledger_ids()):
                if i >= limit:
                    break
                metadata, _ = ledgers.read(ledger_id)
                result.append({str(b) for f in metadata.fragments for b in f.ensemble})
            return result
        finally:
            store.close()
