"""Standalone: the embedded default. One process: an embedded metadata store, bookies and a broker.

Everything lives under one data directory and survives a restart: the metadata store is
durable (impl/metadata/embedded.py), each bookie keeps its journal in its own directory, and
the ports are remembered in `standalone.json`, because a bookie's id is its address and the
ledgers' ensembles name bookies by id.

The bookies run in-process. The broker's BookKeeper client reaches them without a socket: its
channels hand requests straight to each `Bookie` (impl/bookie/client/local_channel.py, marked up and down
as the bookies start and stop), with a bookie connection's answer contract; each bookie also keeps its
port and HTTP service on loopback, for any other client. `bookie_processes` (`--bookie-processes`) runs
each as `pulsar-ref bookie` instead, reached over framed connections; measured to cost more CPU and
latency than the in-process bookies, so it is not the default (docs/broker.md, "The standalone's bookies").
Fault verbs (kill, restart, start, expire-session) act on them and on the broker in place, for the
workload's nemesis; `cluster VERB NODE` sends them to the control endpoint, a small HTTP service
that stays up while the broker is killed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from impl.bookie.client.local_channel import LocalBookiesRegistry
from impl.bookie.core import DEFAULT_MAX_ENTRY_SIZE
from impl.bookie.server import Bookie, BookieServer
from impl.broker import namespaces
from impl.broker.broker import Broker
from impl.broker.managed_ledger import ManagedLedgerConfig
from impl.broker.service import DEFAULT_MAX_MESSAGE_SIZE, BrokerConfig, bookie_frame_for, size_settings_error
from impl.metadata import layout
from impl.metadata.registry import BookieRegistry
from impl.metadata.renewal import SessionRenewer
from impl.metadata.store import MetadataError, MetadataStore, NoNode
from impl.metadata.url import DEFAULT_SESSION_TIMEOUT_S, connect
from impl.metadata.zkserver import free_port, port_is_free
from impl.security.settings import Security
from impl.security.tokens import AuthenticationFailed
from impl.web.http import HttpError, Request, Response, Router
from impl.web.server import WebServer

log = logging.getLogger(__name__)

DEFAULT_PULSAR_PORT = 6650  # Pulsar's own default for pulsar://
DEFAULT_WEB_PORT = 8080  # Pulsar's own default for the web service (admin REST API, lookups, metrics)
DEFAULT_PULSAR_TLS_PORT = 6651  # brokerServicePortTls
DEFAULT_WEB_TLS_PORT = 8443  # webServicePortTls
STATE_FILE = "standalone.json"
LOCK_FILE = "standalone.lock"


class StandaloneAlreadyRunning(OSError):
    """Another standalone holds the data directory."""


def lock_data_dir(data_dir: Path) -> int:
    """Hold an exclusive lock on the data directory for the life of this process. With it, any
    registration of our bookies or broker left in the store is certainly a dead run's."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StandaloneAlreadyRunning(
            f"another standalone is running on {data_dir}; stop it or use another --data directory"
        ) from None
    return fd


class _InProcessBookie:
    """A bookie with its port and its registration; can be killed and restarted in place. The broker
    reaches it through `local` (no socket); other clients through its port."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        registry: BookieRegistry,
        max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE,
        local: LocalBookiesRegistry | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.max_entry_size = max_entry_size  # nettyMaxFrameSizeBytes
        self.port = port
        self.registry = registry
        self.bookie_id = f"127.0.0.1:{port}"
        self.local = local
        if local is not None:
            local.add(self.bookie_id)
        self.server: BookieServer | None = None
        self.paused = False

    def start(self) -> None:
        # The metadata store lets the bookie garbage-collect ledgers whose metadata was deleted
        # (topics trimmed by the broker).
        bookie = Bookie(self.data_dir, metadata=lambda: self.registry.store, max_entry_size=self.max_entry_size)
        for torn in bookie.replay_report.torn:
            log.warning("bookie %s: ignored torn journal tail %s at %d", self.bookie_id, torn.file, torn.offset)
        server = BookieServer(bookie, port=self.port, http_port=0)
        server.start()
        self.server = server
        if self.local is not None:
            self.local.up(self.bookie_id, bookie)
        self.registry.register(self.bookie_id, http_url=server.http_url, netty_max_frame_size_bytes=self.max_entry_size)

    def register_on(self, registry: BookieRegistry) -> None:
        """Register again on a new session (the old one expired and took the node with it)."""
        self.registry = registry
        server = self.server
        if server is not None:
            registry.register(
                self.bookie_id,
                readonly=server.bookie.core.readonly,
                http_url=server.http_url,
                netty_max_frame_size_bytes=self.max_entry_size,
            )

    def stop(self, graceful: bool = True) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        if self.local is not None:
            self.local.down(self.bookie_id)  # as a connection's end: requests in flight fail
        if graceful:
            with contextlib.suppress(MetadataError):  # an expired session's node is gone already
                self.registry.unregister(self.bookie_id)
        server.stop(grace_s=0)  # a crash: requests in flight are lost
        if not graceful:
            # A dead bookie's ephemeral node vanishes when its session does; ours is shared with
            # the other bookies, so remove it by hand as the expiry would.
            with contextlib.suppress(MetadataError):
                self.registry.unregister(self.bookie_id)

    @property
    def up(self) -> bool:
        return self.server is not None


class _ProcessBookie:
    """A bookie in a process of its own (`pulsar-ref bookie` on the standalone's embedded store), for
    `--bookie-processes`; started, killed and restarted by the standalone, registered on its own session.
    Its data directory is the in-process bookie's, so a standalone may switch between the two."""

    def __init__(
        self, data_dir: Path, port: int, registry: BookieRegistry, metadata_url: str, max_entry_size: int
    ) -> None:
        self.data_dir = data_dir
        self.port = port
        self.registry = registry
        self.metadata_url = metadata_url
        self.max_entry_size = max_entry_size
        self.bookie_id = f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        command = [sys.executable, "-c", _DIE_WITH_PARENT, "bookie", "--metadata", self.metadata_url]
        command += ["--data", str(self.data_dir), "--port", str(self.port)]
        command += ["--netty-max-frame-size-bytes", str(self.max_entry_size)]
        proc = _LAUNCHER.submit(subprocess.Popen, command, stdout=subprocess.PIPE, text=True).result()
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening" not in line:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"bookie {self.bookie_id} did not start (exit {proc.poll()}): {line.strip()!r}")
        stdout = proc.stdout
        threading.Thread(target=lambda: stdout.read(), name=f"bookie-{self.port}-stdout", daemon=True).start()
        self.proc = proc

    def register_on(self, registry: BookieRegistry) -> None:
        self.registry = registry  # the process registers itself on its own session

    def stop(self, graceful: bool = True) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if graceful:
            proc.terminate()  # the bookie unregisters and closes its journal
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return
        proc.kill()
        proc.wait()
        # Its session lives on until it times out; remove the node as that expiry would.
        with contextlib.suppress(MetadataError):
            self.registry.unregister(self.bookie_id)

    @property
    def up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# A bookie process asks Linux for SIGKILL when its parent dies (PR_SET_PDEATHSIG; asked by the child itself,
# since a preexec_fn forked beside gRPC's threads may crash). Linux sends it when the launching *thread* exits,
# so every bookie is launched by one thread that lives as long as the process, whichever thread (a control
# request's, for a restart) asked for it.
_DIE_WITH_PARENT = (
    "import ctypes, signal, sys; ctypes.CDLL('libc.so.6').prctl(1, signal.SIGKILL); "
    "from pulsar_ref.cli import main; sys.exit(main())"
)
_LAUNCHER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="bookie-launcher")


def _choose_port(requested: int | None, remembered: int | None, default: int) -> int:
    """The port asked for; if none, the one used last, else Pulsar's default, else any free one."""
    if requested is None:
        candidate = remembered or default
        requested = candidate if port_is_free(candidate) else 0
    return requested or free_port()


class Standalone:
    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        bookies: int = 3,
        web_port: int | None = None,
        security: Security | None = None,
        tls_ports: tuple[int | None, int | None] = (None, None),
        ensemble: int = 2,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        max_entries_per_ledger: int = ManagedLedgerConfig.max_entries_per_ledger,
        cluster: str = namespaces.DEFAULT_CLUSTER,
        configuration_store: str | None = None,  # URL of the instance's configuration store; None: the embedded one
        session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,  # of every metadata session (zooKeeperSessionTimeout)
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,  # maxMessageSize; the bookies' frame limit follows
        bookie_processes: bool = False,  # each bookie in a process of its own (docs/broker.md)
    ) -> None:
        error = size_settings_error(max_message_size)
        if error:
            raise ValueError(error)
        self.cluster = cluster
        self.session_timeout_s = session_timeout_s
        self.configuration_store_url = configuration_store
        self.data_dir = Path(data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = lock_data_dir(self.data_dir)
        state = self._load_state()
        ports = state.get("bookie_ports", [])
        while len(ports) < bookies:
            ports.append(free_port())
        old_broker_port = state.pop("broker_port", None)  # the gRPC API's, before it was removed
        self.control_port = state.get("control_port") or free_port()
        self.pulsar_port = _choose_port(port, state.get("pulsar_port"), DEFAULT_PULSAR_PORT)
        self.web_port = _choose_port(web_port, state.get("web_port"), DEFAULT_WEB_PORT)
        security = security or Security()
        self.tls_ports = (0, 0)
        if security.tls is not None:
            self.tls_ports = (
                _choose_port(tls_ports[0], state.get("pulsar_tls_port"), DEFAULT_PULSAR_TLS_PORT),
                _choose_port(tls_ports[1], state.get("web_tls_port"), DEFAULT_WEB_TLS_PORT),
            )
        self._save_state(
            state
            | {
                "bookie_ports": ports,
                "control_port": self.control_port,
                "pulsar_port": self.pulsar_port,
                "web_port": self.web_port,
            }
            | ({"pulsar_tls_port": self.tls_ports[0], "web_tls_port": self.tls_ports[1]} if security.tls else {})
        )
        self.metadata_url = f"embedded://{self.data_dir / 'metadata'}"
        self.store: MetadataStore = connect(self.metadata_url, self.session_timeout_s)
        # A previous run may have registered under the web port it used then (or, before the
        # broker's identity became its web address, under its gRPC port, kept as "broker_port").
        previous = {self.web_port, state.get("web_port"), old_broker_port} - {None}
        self._clear_stale_registrations(ports[:bookies], sorted(previous))
        registry = BookieRegistry(self.store)
        # The in-process bookies share this session; when it expires (the process was stopped past the
        # session timeout and another session's heartbeat reaped it first) they register again on a new one.
        self._renewer = SessionRenewer(
            "standalone bookies", lambda: connect(self.metadata_url, self.session_timeout_s), self._adopt_session
        )
        self._renewer.watch(self.store)
        frame = bookie_frame_for(max_message_size)
        # The broker reaches in-process bookies without a socket (docs/broker.md, "The standalone's bookies").
        self.local_bookies = None if bookie_processes else LocalBookiesRegistry()
        self.bookies: list[_InProcessBookie | _ProcessBookie] = [
            _ProcessBookie(self.data_dir / f"bookie-{i}", p, registry, self.metadata_url, frame)
            if bookie_processes
            else _InProcessBookie(self.data_dir / f"bookie-{i}", p, registry, frame, self.local_bookies)
            for i, p in enumerate(ports[:bookies])
        ]
        ml_config = ManagedLedgerConfig(
            ensemble=ensemble,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            max_entries_per_ledger=max_entries_per_ledger,
        )
        self.config = BrokerConfig(managed_ledger=ml_config, security=security, max_message_size=max_message_size)
        self.broker: Broker | None = None
        self._lock = threading.Lock()

    def _adopt_session(self, store: MetadataStore) -> None:
        registry = BookieRegistry(store)
        for bookie in self.bookies:
            bookie.register_on(registry)
        old, self.store = self.store, store
        with contextlib.suppress(MetadataError):
            old.close()

    def _clear_stale_registrations(self, bookie_ports: list[int], broker_ports: list[int]) -> None:
        """Delete ephemeral nodes a killed run of this standalone left behind (its session has not
        timed out yet): what that session's expiry would delete. Safe because we hold the lock."""
        brokers = {f"127.0.0.1:{p}" for p in broker_ports}
        paths = [layout.bookie_path(f"127.0.0.1:{p}", ro) for p in bookie_ports for ro in (False, True)]
        paths += [layout.broker_path(b) for b in sorted(brokers)]
        with contextlib.suppress(NoNode):
            for tenant in self.store.children(layout.NAMESPACE_ROOT):
                for ns in self.store.children(f"{layout.NAMESPACE_ROOT}/{tenant}"):
                    base = f"{layout.NAMESPACE_ROOT}/{tenant}/{ns}"
                    for bundle in self.store.children(base):
                        with contextlib.suppress(NoNode):
                            data, _ = self.store.get(f"{base}/{bundle}")
                            if data.decode(errors="replace") in brokers:
                                paths.append(f"{base}/{bundle}")
        for path in paths:
            stat = self.store.exists(path)
            if stat is not None and stat.ephemeral_owner not in (0, self.store.session_id):
                with contextlib.suppress(NoNode):
                    self.store.delete(path)
                log.warning("removed %s, left by a previous run of this standalone", path)

    def _load_state(self) -> dict[str, Any]:
        path = self.data_dir / STATE_FILE
        if not path.exists():
            return {}
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} is unreadable ({e}); restore it or start with an empty --data directory") from e
        return state if isinstance(state, dict) else {}

    def _save_state(self, state: dict[str, Any]) -> None:
        path = self.data_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)

    @property
    def broker_address(self) -> str:
        """The broker's identity: its web service's address, as in Pulsar."""
        return f"127.0.0.1:{self.web_port}"

    @property
    def pulsar_service_url(self) -> str:
        """Where Pulsar's own clients connect: the broker's pulsar:// listener."""
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    @property
    def web_service_url(self) -> str:
        """The broker's web service: admin REST API, HTTP lookups, /metrics, the cluster view."""
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def tls_urls(self) -> tuple[str, str] | None:
        """(pulsar+ssl://, https://) when TLS is on."""
        if self.config.security.tls is None:
            return None
        return f"pulsar+ssl://127.0.0.1:{self.tls_ports[0]}", f"https://127.0.0.1:{self.tls_ports[1]}"

    def start(self) -> None:
        try:
            for bookie in self.bookies:
                bookie.start()
        except BaseException:
            for bookie in self.bookies:
                bookie.stop()
            raise
        self.start_broker()
        self._control = ControlServer(self, self.control_port)

    def control(self, verb: str, node: str) -> Any:
        """A fault or status verb from the control endpoint (what `cluster VERB NODE` sends)."""
        actions = {
            "kill": self.kill,
            "restart": self.restart,
            "start": self.start_node,
            "expire-session": self.expire_session,
        }
        if verb == "status":
            return self.status()
        if verb not in actions:
            raise ValueError(f"unknown verb {verb!r}; use status, {', '.join(actions)}")
        actions[verb](node)
        return self.status()

    def _connect_configuration_store(self) -> Callable[[], MetadataStore] | None:
        url = self.configuration_store_url
        return None if url in (None, self.metadata_url) else lambda: connect(url)

    def start_broker(self) -> None:
        with self._lock:
            if self.broker is not None:
                return
            broker = Broker(
                lambda: connect(self.metadata_url, self.session_timeout_s),
                self.config,
                pulsar_port=self.pulsar_port,
                web_port=self.web_port,
                tls_ports=self.tls_ports,
                cluster=self.cluster,
                connect_configuration_store=self._connect_configuration_store(),
                local_bookies=self.local_bookies,
            )
            broker.start()
            self.broker = broker

    def stop_broker(self, graceful: bool = True) -> None:
        with self._lock:
            broker, self.broker = self.broker, None
        if broker is None:
            return
        if graceful:
            broker.stop()
        else:
            broker.crash()

    # ---- fault verbs (the nemesis on standalone) ----------------------------------------------

    def node(self, name: str) -> _InProcessBookie | _ProcessBookie | None:
        """'bookie-N' names an in-process bookie, 'broker' the broker."""
        if name.startswith("bookie-") and name[7:].isdigit() and int(name[7:]) < len(self.bookies):
            return self.bookies[int(name[7:])]
        if name == "broker":
            return None
        raise ValueError(f"no node {name!r} in standalone; use bookie-0..bookie-{len(self.bookies) - 1} or broker")

    def kill(self, name: str) -> None:
        bookie = self.node(name)
        if bookie is None:
            self.stop_broker(graceful=False)
        else:
            bookie.stop(graceful=False)

    def restart(self, name: str) -> None:
        bookie = self.node(name)
        if bookie is None:
            self.stop_broker(graceful=False)
            self.start_broker()
        else:
            bookie.stop(graceful=False)
            bookie.start()

    def start_node(self, name: str) -> None:
        bookie = self.node(name)
        if bookie is None:
            self.start_broker()
        elif not bookie.up:
            bookie.start()

    def expire_session(self, name: str) -> None:
        if name != "broker" or self.broker is None:
            raise ValueError("in standalone only the broker's session can expire (bookies share it)")
        self.broker.expire_session()

    def status(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = [
            {"node": f"bookie-{i}", "role": "bookie", "up": b.up, "address": b.bookie_id}
            for i, b in enumerate(self.bookies)
        ]
        broker = self.broker
        nodes.append(
            {
                "node": "broker",
                "role": "broker",
                "up": broker is not None,
                "address": self.broker_address,
                **({"stats": broker.stats()} if broker else {}),
            }
        )
        return nodes

    def stop(self) -> None:
        control = getattr(self, "_control", None)
        if control is not None:
            control.stop()
        self._renewer.stop()
        self.stop_broker()
        for bookie in self.bookies:
            bookie.stop()
        with contextlib.suppress(MetadataError):
            self.store.close()
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


def control_refusal(request: Request, port: int, security: Security) -> Response | None:
    """Why the control endpoint refuses `request`, or None. It can kill the broker, so:
    - never from a web page of another origin: a browser names the page's origin in `Origin` (and
      `Sec-Fetch-Site`) on a cross-site form POST or fetch; the endpoint's own origin is loopback:port.
      `Host` must name loopback too, so a DNS-rebound name cannot reach it either;
    - with authentication on, the admin API's token (`Authorization: Bearer`), of a super-user when
      authorization is on too (Pulsar's broker-level admin operations are super-user only)."""
    own = {f"127.0.0.1:{port}", f"localhost:{port}"}
    host = request.headers.get("host", "")
    if host not in own:
        return Response.error(403, f"the control endpoint answers only to Host 127.0.0.1:{port}, not {host!r}")
    origin = request.headers.get("origin")
    if origin is not None and origin not in {f"http://{h}" for h in own}:
        return Response.error(403, f"cross-origin request refused (Origin {origin!r})")
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return Response.error(403, "cross-site request refused (Sec-Fetch-Site)")
    authenticator = security.authenticator
    if authenticator is None:
        return None
    try:
        role = authenticator.authenticate_http(request.headers.get("authorization", ""))
    except AuthenticationFailed as e:
        return Response.error(401, str(e))
    if security.authorization and role not in security.super_user_roles:
        return Response.error(403, f"role {role!r} is not a super-user: the control endpoint is super-user only")
    return None


class ControlServer:
    """The standalone's control endpoint, on 127.0.0.1 only: `GET /status` and `POST /VERB/NODE`
    (kill, restart, start, expire-session), each answered with the nodes' status as JSON. It is not
    the broker's web service, so it stays up while the broker is killed. Guarded by `control_refusal`."""

    def __init__(self, standalone: Standalone, port: int) -> None:
        router = Router()

        @router.get("/status")
        def status(_request: Request) -> Response:
            return Response.json(standalone.status())

        @router.post("/{verb}/{node}")
        def act(_request: Request, verb: str, node: str) -> Response:
            try:
                return Response.json(standalone.control(verb, node))
            except ValueError as e:
                raise HttpError(400, str(e)) from e
            except (MetadataError, OSError, RuntimeError) as e:  # the fault itself failed: say why
                log.exception("standalone %s %s failed", verb, node)
                raise HttpError(500, f"{type(e).__name__}: {e}") from e

        security = standalone.config.security

        def guarded(request: Request) -> Response:
            return control_refusal(request, port, security) or router(request)

        try:
            self.server = WebServer(guarded, "127.0.0.1", port, name="standalone-control", threads=2)
        except OSError as e:
            raise OSError(
                f"cannot listen on control port 127.0.0.1:{port} ({e}); remove {STATE_FILE} to pick new ports"
            ) from e
        self.server.start()

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()
