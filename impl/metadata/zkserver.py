"""Real ZooKeeper servers from Debian's `zookeeper` package, run as `java` processes on loopback.

Nothing is downloaded: the classpath is /usr/share/java/zookeeper.jar plus the jars its
manifest names (and slf4j-simple so the server's log goes to a file). Every server binds
its client, quorum and election ports to 127.0.0.1, has the admin HTTP server off and
only the `ruok`, `srvr` and `mntr` four-letter words enabled (health checks use `srvr`).

Layout under a server's directory (kept across stop/start, so data survives):
    zoo.cfg, data/ (snapshots, myid), datalog/ (transaction log),
    zookeeper.log (the server's log), stdout.log (the JVM's own output), zookeeper.pid

`ZooKeeperServer` is one JVM: standalone, or one member of a `ZooKeeperEnsemble`.
`stop()` is always safe: after a failed start, twice in a row, or from another
process that only has the directory (it finds the JVM through the pidfile).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import psutil

from impl.process_exit import wait_exited

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
LOG_BINDING_JAR = JAVA_DIR / "slf4j-simple.jar"
INSTALL_HINT = "run: apt-get install zookeeper (or `make test`, which installs it)"
# Short ticks so tests can use short sessions (ZooKeeper's minimum session is 2 ticks).
TICK_MS = 500
HEAP = ("-Xms16m", "-Xmx128m")
SERVING_MODES = ("standalone", "leader", "follower")
PR_SET_PDEATHSIG = 1


class ZooKeeperError(Exception):
    """A ZooKeeper server could not be started or stopped; the message says what to do."""


class ZooKeeperNotInstalled(ZooKeeperError):
    """Java or Debian's zookeeper package is missing."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


_handed_out: set[int] = set()  # ports free_port returned in this process


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago, for a server started a little later.

    Picked below the ephemeral range when there is room: ports the OS hands out itself (to
    every outgoing connection) could be taken in the gap before the server binds. Never a port
    it returned before in this process: callers often pick several ports before binding any.
    """
    low, _ = _ephemeral_range()
    if low > 11000:
        for _ in range(200):
            port = random.randrange(10000, low)
            if port not in _handed_out and port_is_free(port):
                _handed_out.add(port)
                return port
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def classpath() -> str:
    """zookeeper.jar, the jars of its manifest Class-Path that exist, and a log binding."""
    if not ZOOKEEPER_JAR.is_file():
        raise ZooKeeperNotInstalled(f"{ZOOKEEPER_JAR} is missing: {INSTALL_HINT}")
    if not Path("/usr/bin/java").exists() and not any(
        (Path(d) / "java").exists() for d in os.environ.get("PATH", "").split(":")
    ):
        raise ZooKeeperNotInstalled(f"no `java` on PATH: {INSTALL_HINT}")
    with zipfile.ZipFile(ZOOKEEPER_JAR) as jar:
        manifest = jar.read("META-INF/MANIFEST.MF").decode()
    # Manifest lines are wrapped at 72 bytes; a continuation line starts with one space.
    unwrapped = manifest.replace("\r\n", "\n").replace("\n ", "")
    needed: list[str] = []
    for line in unwrapped.splitlines():
        if line.startswith("Class-Path:"):
            needed = line.split(":", 1)[1].split()
    jars = [str(ZOOKEEPER_JAR)] + [j for j in needed if Path(j).is_file()]
    if "zookeeper-jute" not in " ".join(jars):
        raise ZooKeeperNotInstalled(f"zookeeper-jute.jar, needed by {ZOOKEEPER_JAR}, is missing: {INSTALL_HINT}")
    if LOG_BINDING_JAR.is_file():
        jars.append(str(LOG_BINDING_JAR))
    return ":".join(jars)


def _kill_me_when_parent_dies() -> None:
    """In the forked child, before exec: ask Linux for SIGKILL when the parent exits."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def four_letter_word(port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a four-letter word to 127.0.0.1:port; the reply, or '' if nobody answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def server_mode(port: int) -> str | None:
    """'standalone', 'leader' or 'follower' if the server on `port` serves requests, else None."""
    for line in four_letter_word(port, "srvr").splitlines():
        if line.startswith("Mode:"):
            mode = line.split(":", 1)[1].strip()
            return mode if mode in SERVING_MODES else None
    return None


@dataclass(frozen=True)
class Peer:
    """One ensemble member's loopback addresses."""

    server_id: int
    client_port: int
    quorum_port: int
    election_port: int


class ZooKeeperServer:
    """One ZooKeeper JVM in `directory`, serving clients on 127.0.0.1:`client_port`.

    Standalone when `peers` is empty; otherwise member `server_id` of the ensemble `peers`.
    """

    def __init__(
        self,
        directory: str | Path,
        client_port: int | None = None,
        server_id: int = 1,
        peers: tuple[Peer, ...] = (),
        die_with_parent: bool = False,
        max_session_timeout_s: float | None = None,
    ) -> None:
        self.directory = Path(directory).resolve()
        # Test fixtures set this so that a killed test run leaves no JVM behind (Linux only).
        self.die_with_parent = die_with_parent
        # ZooKeeper grants a session at most this long (its maxSessionTimeout); None: its default, 20
        # ticks (10 s with TICK_MS), whatever longer session a client asks for.
        self.max_session_timeout_s = max_session_timeout_s
        self.client_port = client_port if client_port is not None else free_port()
        self.server_id = server_id
        self.peers = peers
        self._process: subprocess.Popen[bytes] | None = None

    # --- paths -------------------------------------------------------------------

    @property
    def config_file(self) -> Path:
        return self.directory / "zoo.cfg"

    @property
    def log_file(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def stdout_file(self) -> Path:
        return self.directory / "stdout.log"

    @property
    def pid_file(self) -> Path:
        return self.directory / "zookeeper.pid"

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    # --- lifecycle -----------------------------------------------------------------

    def write_config(self) -> None:
        data, datalog = self.directory / "data", self.directory / "datalog"
        data.mkdir(parents=True, exist_ok=True)
        datalog.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={TICK_MS}",
            "initLimit=20",
            "syncLimit=10",
            f"dataDir={data}",
            f"dataLogDir={datalog}",
            f"clientPort={self.client_port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr",
            "maxClientCnxns=0",
            "preAllocSize=4096",  # KiB: keep test directories small
            "snapCount=10000",
        ]
        if self.max_session_timeout_s is not None:
            lines.append(f"maxSessionTimeout={int(self.max_session_timeout_s * 1000)}")
        if self.peers:
            lines.append("quorumListenOnAllIPs=false")
            lines += [f"server.{p.server_id}=127.0.0.1:{p.quorum_port}:{p.election_port}" for p in self.peers]
            (data / "myid").write_text(f"{self.server_id}\n")
        self.config_file.write_text("\n".join(lines) + "\n")

    def launch(self) -> None:
        """Start the JVM in the background (its own session, so it outlives the caller)."""
        if self.pid() is not None:
            raise ZooKeeperError(
                f"a ZooKeeper server from {self.directory} is already running (pid {self.pid()}); stop it first"
            )
        cp = classpath()
        self.write_config()
        command = [
            "java",
            *HEAP,
            "-XX:+UseSerialGC",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dorg.slf4j.simpleLogger.logFile={self.log_file}",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp",
            cp,
            MAIN_CLASS,
            str(self.config_file),
        ]
        with open(self.stdout_file, "ab") as out:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                preexec_fn=_kill_me_when_parent_dies if self.die_with_parent else None,
            )
        self.pid_file.write_text(f"{self._process.pid}\n")

    def start(self, timeout_s: float = 60.0) -> None:
        """Launch and wait until the server serves requests (standalone) or has joined a quorum."""
        self.launch()
        self.wait_serving(timeout_s)

    def wait_serving(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise ZooKeeperError(
                    f"ZooKeeper server {self.server_id} in {self.directory} exited during start-up "
                    f"(port {self.client_port} taken?). Log tail:\n{self.log_tail()}"
                )
            if self.mode() is not None:
                return
            time.sleep(0.1)
        raise ZooKeeperError(
            f"ZooKeeper server {self.server_id} in {self.directory} did not serve on {self.connect_string} "
            f"within {timeout_s:.0f}s. Log tail:\n{self.log_tail()}"
        )

    def mode(self) -> str | None:
        """'standalone', 'leader', 'follower', or None when not serving."""
        return server_mode(self.client_port)

    def pid(self) -> int | None:
        """The running JVM's pid (found through the pidfile, checked against its command line)."""
        if self._process is not None:
            if self._process.poll() is None:
                # Our own child: trust the handle. Just after fork its command line may not be java's yet.
                return self._process.pid
            self._process = None
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            if str(self.config_file) not in process.cmdline():
                return None  # the pid was reused by something else
        except psutil.Error:
            return None
        return pid

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after `timeout_s`). Safe at any time."""
        self._signal_and_wait(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """kill -9: a crash, no clean shutdown."""
        self._signal_and_wait(signal.SIGKILL, 10.0)

    def restart(self, timeout_s: float = 60.0) -> None:
        self.stop()
        self.start(timeout_s)

    def _signal_and_wait(self, sig: signal.Signals, timeout_s: float) -> None:
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                process.send_signal(sig)
                try:
                    wait_exited(process, timeout_s)
                except psutil.TimeoutExpired:
                    process.kill()
                    wait_exited(process, 10)
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(10)  # reap our own child
            self._process = None
        self.pid_file.unlink(missing_ok=True)

    def log_tail(self, lines: int = 30) -> str:
        text = ""
        for f in (self.stdout_file, self.log_file):
            with contextlib.suppress(OSError):
                text += "".join(f.read_text(errors="replace").splitlines(keepends=True)[-lines:])
        return text or "(no log written)"


def read_config(config_file: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in config_file.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            entries[key.strip()] = value.strip()
    return entries


def server_from_directory(directory: str | Path) -> ZooKeeperServer:
    """The server whose zoo.cfg is in `directory`, with the ports it was configured with."""
    directory = Path(directory).resolve()
    config = directory / "zoo.cfg"
    if not config.is_file():
        raise ZooKeeperError(f"no ZooKeeper server in {directory} (no zoo.cfg); start one with `pulsar-ref zk start`")
    entries = read_config(config)
    peers = []
    for key, value in entries.items():
        if key.startswith("server."):
            _, quorum, election = value.split(":")[:3]
            peers.append(Peer(int(key.split(".", 1)[1]), 0, int(quorum), int(election)))
    myid_file = directory / "data" / "myid"
    server_id = int(myid_file.read_text().strip()) if peers and myid_file.is_file() else 1
    return ZooKeeperServer(
        directory, int(entries["clientPort"]), server_id, tuple(sorted(peers, key=lambda p: p.server_id))
    )


def servers_in(directory: str | Path) -> list[ZooKeeperServer]:
    """Every server set up under `directory` (its zk-N subdirectories), in server id order."""
    found = [server_from_directory(d) for d in sorted(Path(directory).glob("zk-*")) if (d / "zoo.cfg").is_file()]
    return sorted(found, key=lambda s: s.server_id)


class ZooKeeperEnsemble:
    """`size` servers on loopback, each in `directory`/zk-N with its own ports: a quorum, or one standalone server.

    `first_client_port` P gives client ports P, P+1, ...; None (or 0) lets the OS pick free ones.
    """

    def __init__(self, directory: str | Path, size: int = 3, first_client_port: int | None = None) -> None:
        if size < 1:
            raise ValueError(f"an ensemble needs at least one server, not {size}")
        self.directory = Path(directory).resolve()
        if not first_client_port:
            client_ports = [free_port() for _ in range(size)]
        else:
            client_ports = [first_client_port + i for i in range(size)]
        if size == 1:  # a lone server runs standalone: no quorum ports
            self.servers = [ZooKeeperServer(self.directory / "zk-1", client_ports[0])]
            return
        peers = tuple(Peer(i + 1, client_ports[i], free_port(), free_port()) for i in range(size))
        self.servers = [
            ZooKeeperServer(self.directory / f"zk-{p.server_id}", p.client_port, p.server_id, peers) for p in peers
        ]

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    @classmethod
    def in_directory(cls, directory: str | Path) -> ZooKeeperEnsemble:
        """The ensemble (or single server) set up earlier under `directory`, same ports, same data."""
        ensemble = cls.__new__(cls)
        ensemble.directory = Path(directory).resolve()
        ensemble.servers = servers_in(directory)
        if not ensemble.servers:
            raise ZooKeeperError(f"no ZooKeeper set up in {ensemble.directory}; start one with `pulsar-ref zk start`")
        return ensemble

    def start(self, timeout_s: float = 90.0) -> None:
        """Launch every server, then wait until all of them serve in one quorum."""
        for server in self.servers:
            server.launch()
        deadline = time.monotonic() + timeout_s
        for server in self.servers:
            server.wait_serving(max(1.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Stop every server; safe at any time, also after a failed start."""
        for server in self.servers:
            server.stop()

    def kill(self) -> None:
        """kill -9 every server (a whole-ensemble crash; single servers: `servers[i].kill()`)."""
        for server in self.servers:
            server.kill()

    def restart(self, timeout_s: float = 90.0) -> None:
        self.stop()
        self.start(timeout_s)

    def leader(self) -> ZooKeeperServer | None:
        return next((s for s in self.servers if s.mode() == "leader"), None)
