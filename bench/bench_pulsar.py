"""Pulsar's official client (pulsar-client 3.13.0) against pulsar-ref, and against a peer broker.

Deployments:
  standalone   `pulsar-ref standalone` (embedded metadata, three in-process bookies, one broker; E2/Qw2/Qa2)
  cluster      real ZooKeeper, three `pulsar-ref bookie` and two `pulsar-ref broker` processes (E2/Qw2/Qa2)
  proxy        the same cluster with one `pulsar-ref proxy` in front: the client's service URL is the
               proxy's, so its lookups and every topic's traffic go through the proxy (Pulsar's proxy)
  pulsar-lite  the `pulsar-lite` 0.2.0 broker (Rust, RocksDB, one process) from PyPI, as a peer

Durability differs and every table says so: pulsar-ref acknowledges a message once Qa=2 bookies
have fsynced it to their journals; pulsar-lite never calls fsync.

Rows (1 KiB unless said otherwise), in this order, each on a topic of its own:
  fixed rate         --rate msg/s for --seconds, unbatched, a consumer acknowledging each message:
                     publish latency from each message's scheduled time to its receipt, end-to-end
                     latency to its arrival at the consumer (first, on the fresh deployment)
  sync send          one send at a time: msg/s, p50/p99 of each send
  async unbatched    sends with up to 1,000 outstanding (max_pending_messages)
  async batched      100 B and 1 KiB, client-side batching (up to 1,000 messages or 10 ms)
  consume            a backlog of --backlog messages (batched, then unbatched) read by a Shared consumer
                     that acknowledges each message

Beside each row: the CPU (user + system, from /proc/<pid>/stat) the broker process(es) spent per message
of the row, summed over the two brokers of cluster and proxy, and the proxy's own CPU per message in a
column of its own. The standalone's one process holds its bookies and metadata store too; the cluster's
brokers hold neither; pulsar-lite's process is the whole peer. A consume row's CPU is read around the reads
only (and 0.5 s after, the acks' persistence), not the backlog's publish; the fixed-rate row's covers
the publish and the delivery. After the rows: each broker's (and the proxy's) resident memory, at the
end and at its peak (VmRSS, VmHWM from /proc/<pid>/status).

Each table ends with a calibration line from the same run: the time of a fixed pure-Python loop
and the load average, so that figures from another machine can be compared, and what the disk did
during the fixed-rate row: a probe thread writes 1 KiB with O_DSYNC every 10 ms to a file of its own
on the same disk and reports its write + fdatasync p50 and maximum, and how many took over 20 ms. All
the bookies of a deployment share that disk, so a stall of the disk is a stall of every add.

After the deployments' tables, each round prints one more: every row's figure per deployment, its ratio
to pulsar-lite's, and the cluster's and the proxy's ratio to the standalone's (issue 46's target: within
0.8x of the standalone: msg/s at least 0.8x of its, latency at most 1/0.8 = 1.25x of its). A ratio is
always figure / peer. The round's figures go to bench/results/pulsar.jsonl (bench/dashboard.py), each
with pulsar-lite's as its peer, and the cluster's and the proxy's also as "..., to the standalone".

`--rows short` runs only async unbatched 1 KiB and consume unbatched (a quick look at the publish
and delivery paths on a shared machine).
`--rows fixed-rate` runs only the fixed-rate row, `--rounds N` times, each on a fresh deployment.
`--rows fixed-rate short` runs both on each deployment, the fixed-rate row first.
`--rows disk-probe` runs only the disk probe, for --seconds, `--rounds N` times, with no deployment
and no client: what the disk does on its own, to read the fixed-rate rows against.

    .venv/bin/python bench/bench_pulsar.py [--deployment standalone cluster proxy pulsar-lite]
        [--messages 100000] [--backlog 100000] [--rate 1000] [--seconds 10] [--rows fixed-rate --rounds 3]
        [--rows fixed-rate short --messages 20000 --backlog 20000]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulsar  # noqa: E402
from results_log import append, calibration, row  # noqa: E402  (bench/ is on the path of a script run)

from impl.cluster.deployment import Cluster  # noqa: E402
from impl.metadata.zkserver import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUORUMS = ("--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2")
TARGETS = {
    "async batched 1 KiB": 20_000,
    "async batched 100 B": 20_000,
    "async unbatched": 5_000,
    "consume batched": 20_000,
    "consume unbatched": 5_000,
}


class DiskProbe:
    """While running: a 1 KiB O_DSYNC write every 10 ms to a file in `directory` (the deployment's disk),
    timing each write + fdatasync."""

    INTERVAL_S = 0.01

    def __init__(self, directory: Path) -> None:
        self.path = directory / "disk-probe.dat"
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-probe", daemon=True)

    def __enter__(self) -> DiskProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.path.unlink(missing_ok=True)

    def _run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_DSYNC", 0), 0o644)
        try:
            record = b"d" * 1024
            while not self._stop.wait(self.INTERVAL_S):
                start = time.perf_counter()
                os.write(fd, record)
                if not getattr(os, "O_DSYNC", 0):
                    os.fdatasync(fd)
                self.latencies.append(time.perf_counter() - start)
        finally:
            os.close(fd)

    def summary(self, during: str = "during the fixed-rate row") -> str:
        slow = sum(1 for x in self.latencies if x > 0.02)
        return (
            f"disk {during}: {len(self.latencies)} probe writes (1 KiB, O_DSYNC) p50 "
            f"{pct(self.latencies, 50):.2f} ms, max {pct(self.latencies, 100):.0f} ms, {slow} over 20 ms"
        )


# ---- processes: CPU and memory from /proc ---------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident now, resident at its peak) of a process, MiB (VmRSS, VmHWM of /proc/<pid>/status)."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024  # kB
    return found["VmRSS"], found["VmHWM"]


class Meter:
    """The CPU seconds a deployment's broker processes (summed) and its proxies spent between readings."""

    def __init__(self, broker_pids: list[int], proxy_pids: list[int]) -> None:
        self.broker_pids, self.proxy_pids = broker_pids, proxy_pids
        self.reset()

    def _read(self) -> tuple[float, float]:
        return sum(map(cpu_seconds, self.broker_pids)), sum(map(cpu_seconds, self.proxy_pids))

    def reset(self) -> None:
        self._broker, self._proxy = self._read()

    def per_message(self, n: int) -> tuple[float, float | None]:
        """Microseconds per message of the brokers and of the proxies (None: there are none) since the last
        reading; starts the next."""
        broker, proxy = self._read()
        used = ((broker - self._broker) / n * 1e6, (proxy - self._proxy) / n * 1e6 if self.proxy_pids else None)
        self._broker, self._proxy = broker, proxy
        return used


# ---- deployments ---------------------------------------------------------------------------


class Standalone:
    name = "standalone"
    durability = "ack after Qa=2 bookies fsynced (E2/Qw2/Qa2); one process: broker, bookies, metadata"

    def __init__(self, data: Path, *options: str) -> None:
        """`options`: more `pulsar-ref standalone` arguments (`--secure`: `tls_url`, `token`, `trust` are set)."""
        args = ["standalone", "--data", str(data), "--port", "0", "--web-port", "0", *QUORUMS, *options]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pulsar_ref.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, cwd=ROOT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"Pulsar clients: (pulsar://\S+);", line)
        if not found:
            self.stop()
            raise RuntimeError(f"standalone did not start: {line!r}")
        self.url = found.group(1)
        tls = re.search(r"TLS: (pulsar\+ssl://\S+),", line)
        self.tls_url = tls.group(1) if tls else ""
        secure = re.search(r"super-user token (\S+); trust certs (\S+)", line)
        self.token = Path(secure.group(1)).read_text().strip() if secure else ""
        self.trust = secure.group(2) if secure else ""
        self.broker_pids, self.proxy_pids = [self.proc.pid], list[int]()

    def stop(self) -> None:
        _stop(self.proc, 60)


def _stop(proc: subprocess.Popen[Any], timeout_s: float) -> None:
    """SIGTERM, and SIGKILL when it has not exited within `timeout_s`."""
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class ClusterDeployment:
    name = "cluster"
    durability = "ack after Qa=2 bookies fsynced (E2/Qw2/Qa2), 2 brokers"
    proxies = 0

    def __init__(self, data: Path) -> None:
        self.cluster = Cluster.plan(
            data, bookies=3, brokers=2, proxies=self.proxies, die_with_parent=True, broker_options=QUORUMS
        )
        try:
            self.cluster.up()
            self.broker_pids = self._pids("broker")
            self.proxy_pids = self._pids("proxy")
        except BaseException:
            self.cluster.down()
            raise
        assert self.cluster.pulsar_service_url is not None
        self.url = self.cluster.pulsar_service_url  # the proxy's when there is one

    def _pids(self, role: str) -> list[int]:
        pids = [node.pid() for node in self.cluster.nodes(role)]
        if None in pids:
            raise RuntimeError(f"a {role} of the cluster has no process: {pids}")
        return [pid for pid in pids if pid is not None]

    def stop(self) -> None:
        self.cluster.down()


class ProxyDeployment(ClusterDeployment):
    name = "proxy"
    durability = "ack after Qa=2 bookies fsynced (E2/Qw2/Qa2), 2 brokers behind 1 proxy (the client's service URL)"
    proxies = 1


class PulsarLite:
    name = "pulsar-lite"
    durability = "no fsync (RocksDB, pulsar-lite's default)"

    def __init__(self, data: Path) -> None:
        import pulsar_lite  # the peer: pip install pulsar-lite==0.2.0

        binary = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
        port = free_port()
        self.proc = subprocess.Popen(
            [str(binary), "--addr", f"127.0.0.1:{port}", "--db-path", str(data), "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=data.parent,
        )  # fmt: skip
        self.broker_pids, self.proxy_pids = [self.proc.pid], list[int]()
        self.url = f"pulsar://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()  # a client would log each refusal
                c = pulsar.Client(self.url, operation_timeout_seconds=5, logger=QUIET)
                c.create_producer("persistent://public/default/ready").send(b"x")
                c.close()
                return
            except Exception:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("pulsar-lite did not start")

    def stop(self) -> None:
        _stop(self.proc, 30)


Deployment = Standalone | ClusterDeployment | PulsarLite
DEPLOYMENTS: dict[str, Callable[[Path], Deployment]] = {
    "standalone": Standalone,
    "cluster": ClusterDeployment,
    "proxy": ProxyDeployment,
    "pulsar-lite": PulsarLite,
}
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)  # the client's INFO lines would bury the tables
PEER = "pulsar-lite"
BASE = "standalone"  # the cluster's and the proxy's rows within 0.8x of its (issue 46)
WITHIN = 0.8


# ---- rows ----------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000 if ordered else float("nan")


_topics = iter(range(1_000_000))


def topic(kind: str) -> str:
    return f"persistent://public/default/bench-{kind}-{os.getpid()}-{next(_topics)}"


def sync_send(client: pulsar.Client, n: int) -> tuple[float, float, float]:
    producer = client.create_producer(topic("sync"))
    payload, latencies = b"x" * 1024, []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        producer.send(payload)
        latencies.append(time.perf_counter() - t0)
    rate = n / (time.perf_counter() - start)
    producer.close()
    return rate, pct(latencies, 50), pct(latencies, 99)


def async_send(client: pulsar.Client, n: int, size: int, batching: bool, name: str | None = None) -> float:
    producer = client.create_producer(
        name or topic("async"), batching_enabled=batching, batching_max_messages=1000,
        batching_max_publish_delay_ms=10, max_pending_messages=1000, block_if_queue_full=True,
    )  # fmt: skip
    payload, done, errors = b"x" * size, threading.Semaphore(0), []

    def sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            errors.append(result)
        done.release()

    start = time.perf_counter()
    for _ in range(n):
        producer.send_async(payload, sent)
    producer.flush()
    for _ in range(n):
        done.acquire()
    rate = n / (time.perf_counter() - start)
    producer.close()
    if errors:
        raise RuntimeError(f"{len(errors)} sends failed: {errors[0]}")
    return rate


def consume_backlog(client: pulsar.Client, n: int, batched: bool, meter: Meter | None = None) -> float:
    """msg/s reading a backlog of `n`; `meter`, when given, is reset after the backlog's publish and read
    0.5 s after the last receive (the acks' persistence) by the caller."""
    name = topic("backlog")
    consumer = client.subscribe(name, "bench", consumer_type=pulsar.ConsumerType.Shared)
    async_send(client, n, 1024, batched, name)
    if meter is not None:
        meter.reset()
    start = time.perf_counter()
    for _ in range(n):
        consumer.acknowledge(consumer.receive(30_000))
    rate = n / (time.perf_counter() - start)
    if meter is not None:
        time.sleep(0.5)
    consumer.close()
    return rate


def fixed_rate(client: pulsar.Client, rate: int, seconds: float) -> tuple[float, float, float, float]:
    name = topic("rate")
    consumer = client.subscribe(name, "bench")
    producer = client.create_producer(name, max_pending_messages=10_000, block_if_queue_full=True)
    n = int(rate * seconds)
    scheduled = [0.0] * n
    published: list[float] = []
    arrived: list[float] = []

    def receive() -> None:
        for _ in range(n):
            m = consumer.receive(30_000)
            arrived.append(time.perf_counter() - scheduled[int(m.data()[:10])])
            consumer.acknowledge(m)

    reader = threading.Thread(target=receive)
    reader.start()
    start = time.perf_counter()
    for i in range(n):
        scheduled[i] = start + i / rate
        delay = scheduled[i] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = scheduled[i]
        producer.send_async(b"%010d" % i + b"x" * 1014, lambda _r, _m, t=t: published.append(time.perf_counter() - t))
    producer.flush()
    reader.join(60)
    producer.close()
    consumer.close()
    return pct(published, 50), pct(published, 99), pct(arrived, 50), pct(arrived, 99)


def unit(name: str) -> str:
    """The unit of a figure, by its name."""
    if name.endswith(" CPU"):
        return "us/msg"
    if name.endswith(" RSS"):
        return "MiB"
    return "ms" if name.endswith(("p50", "p99")) else "msg/s"


class Table:
    """One deployment's table: a line per row, with its CPU per message; the figures by name."""

    def __init__(self, deployment: str, durability: str, meter: Meter, figures: dict[str, float]) -> None:
        self.meter, self.figures = meter, figures
        self.lines = [
            f"### {deployment}: {durability}",
            "",
            "| row | msg/s | p50 ms | p99 ms | broker CPU us/msg | proxy CPU us/msg | target |",
            "|---|---|---|---|---|---|---|",
        ]

    def add(
        self, name: str, rate: float, n: int, p50: str = "", p99: str = "", target: str = "", key: str = ""
    ) -> None:
        """A row that just ran `n` messages, its CPU since the meter's last reading; `key` (`name` up to its
        first " (" unless given) names its figures ("<key>, broker CPU", "<key>, proxy CPU")."""
        broker, proxy = self.meter.per_message(n)
        key = key or name.split(" (")[0]
        self.figures[f"{key}, broker CPU"] = broker
        cell = ""
        if proxy is not None:
            self.figures[f"{key}, proxy CPU"] = proxy
            cell = f"{proxy:.0f}"
        self.lines.append(f"| {name} | {rate:,.0f} | {p50} | {p99} | {broker:.0f} | {cell} | {target} |")

    def memory(self, role: str, pids: list[int]) -> None:
        """The processes' resident memory, now and at its peak; the figure is the sum of the peaks."""
        if not pids:
            return
        sizes = [memory_mib(pid) for pid in pids]
        self.figures[f"{role} peak RSS"] = sum(peak for _, peak in sizes)
        each = ", ".join(f"{now:.0f} (peak {peak:.0f})" for now, peak in sizes)
        self.lines.append(f"{role} RSS MiB at the end: {each}")


def run(deployment: str, args: argparse.Namespace, work: Path, figures: dict[str, float] | None = None) -> list[str]:
    """One deployment's rows, printed as a table; `figures` gets each row's figure (msg/s, ms, CPU us/msg,
    MiB) by name."""
    figures = {} if figures is None else figures
    work.mkdir(parents=True, exist_ok=True)
    target = DEPLOYMENTS[deployment](work / deployment)
    try:
        client = pulsar.Client(target.url, operation_timeout_seconds=60, logger=QUIET)
        try:
            table = Table(deployment, target.durability, Meter(target.broker_pids, target.proxy_pids), figures)
            during = rows(client, args, table, work)
            table.lines.append("")
            table.memory("broker", target.broker_pids)
            table.memory("proxy", target.proxy_pids)
        finally:
            client.close()
    finally:
        target.stop()
    lines = [*table.lines, "", f"{calibration()}; {during}", ""]
    print("\n".join(lines), flush=True)
    return lines


def rows(client: pulsar.Client, args: argparse.Namespace, table: Table, work: Path) -> str:
    """The rows `args.rows` asks for into `table`; returns what the disk probe saw."""
    figures, chosen = table.figures, set(args.rows)
    with DiskProbe(work) as disk:
        if "fixed-rate" in chosen or "all" in chosen:
            # The fixed-rate row first, on the fresh deployment: after the backlog rows the broker goes on
            # trimming, persisting cursors and collecting a large heap for a while.
            table.meter.reset()
            p50, p99, e50, e99 = fixed_rate(client, args.rate, args.seconds)
            fixed = f"fixed {args.rate:,} msg/s"
            figures[f"{fixed}, publish p99"] = p99
            figures[f"{fixed}, end-to-end p50"] = e50
            # What the broker adds after the receipt: the target is 0.5 ms (issue 46).
            figures[f"{fixed}, delivery after publish p50"] = e50 - p50
            n = int(args.rate * args.seconds)
            table.add(f"{fixed}, publish latency", args.rate, n, f"{p50:.2f}", f"{p99:.2f}", "p99 < 20", fixed)
            table.lines.append(f"| {fixed}, end-to-end latency | {args.rate:,} | {e50:.2f} | {e99:.2f} | | | |")
        if "short" in chosen:
            table.meter.reset()
            rate = figures["async unbatched"] = async_send(client, args.messages, 1024, False)
            table.add("async unbatched", rate, args.messages, target=f">= {TARGETS['async unbatched']:,}")
            rate = figures["consume unbatched"] = consume_backlog(client, args.backlog, False, table.meter)
            backlog = f"consume unbatched ({args.backlog:,} backlog, Shared, acks)"
            table.add(backlog, rate, args.backlog, target=f">= {TARGETS['consume unbatched']:,}")
    during = {
        frozenset({"short"}): "during the two rows",
        frozenset({"fixed-rate", "short"}): "during the fixed-rate row and the two short rows",
    }.get(frozenset(chosen), "during the fixed-rate row")
    if "all" not in chosen:
        return disk.summary(during)
    table.meter.reset()
    rate, p50, p99 = sync_send(client, min(args.messages, 5000))
    table.add("sync send 1 KiB", rate, min(args.messages, 5000), f"{p50:.2f}", f"{p99:.2f}")
    for name, size, batching in (
        ("async unbatched", 1024, False),
        ("async batched 100 B", 100, True),
        ("async batched 1 KiB", 1024, True),
    ):
        table.meter.reset()
        rate = figures[name] = async_send(client, args.messages, size, batching)
        table.add(name, rate, args.messages, target=f">= {TARGETS[name]:,}")
    for name, batched in (("consume batched", True), ("consume unbatched", False)):
        rate = figures[name] = consume_backlog(client, args.backlog, batched, table.meter)
        table.add(
            f"{name} ({args.backlog:,} backlog, Shared, acks)", rate, args.backlog, target=f">= {TARGETS[name]:,}"
        )
    return disk.summary(during)


def within(name: str, ratio: float) -> str:
    """Issue 46's verdict on a cluster or proxy figure / the standalone's ("" for CPU and memory)."""
    kind = unit(name)
    if kind == "msg/s":
        return "met" if ratio >= WITHIN else "NOT met"
    if kind == "ms" and "delivery after publish" not in name:
        return "met" if ratio <= 1 / WITHIN else "NOT met"
    return ""


def compare(figures: dict[str, dict[str, float]]) -> list[str]:
    """The round's figures side by side: each deployment's, its ratio to pulsar-lite's and the cluster's and
    the proxy's to the standalone's (figure / peer; the verdict of issue 46's "within 0.8x")."""
    deployments = list(figures)
    ours = [d for d in deployments if d != PEER]
    to_peer = [d for d in ours if PEER in figures]
    to_base = [d for d in ours if d != BASE and BASE in figures]
    header = ["row", *deployments, *(f"{d} / {PEER}" for d in to_peer), *(f"{d} / {BASE}" for d in to_base)]
    lines = [
        f"### the round's ratios (figure / peer; within {WITHIN}x of the {BASE}: msg/s >= {WITHIN}x, "
        f"latency <= {1 / WITHIN:.2f}x)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    names = list(dict.fromkeys(name for d in deployments for name in figures[d]))

    def ratio(d: str, peer: str, name: str) -> float | None:
        value, other = figures[d].get(name), figures[peer].get(name)
        return value / other if value is not None and other else None

    for name in names:
        cells = [f"{name} ({unit(name)})"]
        digits = 2 if unit(name) == "ms" else 0
        cells += [f"{figures[d][name]:,.{digits}f}" if name in figures[d] else "" for d in deployments]
        for d in to_peer:
            r = ratio(d, PEER, name)
            cells.append("" if r is None else f"{r:.2f}")
        for d in to_base:
            r = ratio(d, BASE, name)
            verdict = "" if r is None else within(name, r)
            cells.append("" if r is None else f"{r:.2f}" + (f" {verdict}" if verdict else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def probe_disk(seconds: float, work: Path) -> None:
    """The disk probe alone, nothing else of the benchmark's running."""
    work.mkdir(parents=True, exist_ok=True)
    with DiskProbe(work) as disk:
        time.sleep(seconds)
    print(f"{calibration()}; {disk.summary(f'alone for {seconds:g} s')}", flush=True)


def records(figures: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One round's rows for bench/results/pulsar.jsonl: each figure with pulsar-lite's as its peer when it ran,
    and the cluster's and the proxy's once more as "<deployment>: <row>, to the standalone", the standalone's
    figure as the peer (issue 46's 0.8x)."""
    peer, base = figures.get(PEER, {}), figures.get(BASE, {})
    ours = [d for d in figures if d != PEER] or [PEER]
    out = []
    for deployment in ours:
        for name, value in figures[deployment].items():
            other = peer.get(name) if deployment != PEER else None
            out.append(row(f"{deployment}: {name}", value, unit(name), PEER if other else None, other))
    for deployment in ours:
        if deployment in (BASE, PEER):
            continue
        for name, value in figures[deployment].items():
            if base.get(name):
                out.append(row(f"{deployment}: {name}, to the {BASE}", value, unit(name), BASE, base[name]))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--deployment",
        nargs="+",
        choices=list(DEPLOYMENTS),
        default=list(DEPLOYMENTS),
        help="the deployments to run, in this order (all four: " + " ".join(DEPLOYMENTS) + "); `proxy` is the "
        "2-broker cluster behind one `pulsar-ref proxy`",
    )
    parser.add_argument(
        "--messages",
        type=int,
        default=100_000,
        help="messages per publish row (100,000: each row times seconds, not a fraction of one)",
    )
    parser.add_argument("--backlog", type=int, default=100_000, help="backlog of each consume row (100,000)")
    parser.add_argument("--rate", type=int, default=1000, help="fixed-rate row: messages per second (1,000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="fixed-rate row or disk probe: seconds (10)")
    parser.add_argument(
        "--rows",
        nargs="+",
        choices=["all", "short", "fixed-rate", "disk-probe"],
        default=["all"],
        help="every row; async unbatched + consume unbatched; the fixed-rate row (`fixed-rate short`: both); "
        "or the disk probe alone (all)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each deployment, each a fresh one (1)")
    args = parser.parse_args(argv)
    alone = {"all", "disk-probe"} & set(args.rows)
    if alone and len(set(args.rows)) > 1:
        parser.error(f"--rows {alone.pop()} goes alone; only fixed-rate and short combine")
    return args


def main() -> int:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pulsar-"))
    print(f"command: {' '.join(sys.argv)}\n{calibration()}\n", flush=True)
    try:
        for round_ in range(args.rounds):
            if args.rows == ["disk-probe"]:
                probe_disk(args.seconds, work)
                continue
            start = calibration()
            figures = {deployment: dict[str, float]() for deployment in args.deployment}
            for deployment in args.deployment:
                run(deployment, args, work / f"round-{round_}", figures[deployment])
            end = calibration()
            print("\n".join([*compare(figures), "", end, ""]), flush=True)
            append("pulsar", records(figures), calibration=f"{start} (start of the round); {end} (end)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
