"""The standalone's bookies in the broker's process or in processes of their own (issue 46, item 4).

Arrangements, all with the official client (pulsar-client 3.13.0) and E2/Qw2/Qa2, in one invocation:
  in-process   `pulsar-ref standalone`: embedded metadata, three bookies and the broker in one process
               and one interpreter, the broker reaching its bookies without gRPC (local channels)
  separate     the same pieces as processes: three `pulsar-ref bookie` and one `pulsar-ref broker` on the
               same embedded metadata store (`embedded://DIR`), the bookies with their defaults, the broker
               with the standalone's quorums; nothing else differs from the standalone
  pulsar-lite  the peer broker (Rust, never fsyncs), as in bench/bench_pulsar.py
  option       `pulsar-ref standalone --bookie-processes`: the standalone launching its bookies as processes
               (not run unless named in --arrangements)

Rows, on a fresh deployment each round (the fixed-rate row first, as bench_pulsar.py runs it):
  fixed rate       --rate msg/s for --seconds, 1 KiB unbatched, publish and end-to-end p50/p99
  async unbatched  --messages sends of 1 KiB, up to 1,000 outstanding
  consume          a --backlog of 1 KiB unbatched messages read by a Shared consumer acking each one

Beside each row: the CPU the broker's process spent per message (from /proc; for in-process that process
holds the bookies too) and the CPU of every pulsar-ref process of the arrangement per message (the
separate bookies' included). The calibration line and the load average open and close each round.

    .venv/bin/python bench/bench_standalone_bookies.py [--rounds 3] [--messages 20000] [--backlog 20000]
        [--rate 1000] [--seconds 10] [--arrangements in-process separate pulsar-lite]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
import pulsar  # noqa: E402
from bench_client import cpu_seconds  # noqa: E402  (bench/ is on the path of a script run)
from bench_pulsar import QUORUMS, DiskProbe, PulsarLite, Standalone, async_send, fixed_rate, topic  # noqa: E402
from results_log import calibration  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BOOKIES = 3  # the standalone's default


class InProcess(Standalone):
    """`pulsar-ref standalone`: the broker and its bookies in one process."""

    name = "in-process"

    def __init__(self, data: Path) -> None:
        super().__init__(data)
        self.broker_pid = self.proc.pid
        self.pids = [self.proc.pid]


class Option(Standalone):
    """`pulsar-ref standalone --bookie-processes`: the standalone launching its bookies as processes."""

    name = "option"

    def __init__(self, data: Path) -> None:
        super().__init__(data, "--bookie-processes")
        self.broker_pid = self.proc.pid
        self.pids = [self.proc.pid, *(c.pid for c in psutil.Process(self.proc.pid).children())]


class Separate:
    """Three `pulsar-ref bookie` processes and one `pulsar-ref broker` on one embedded metadata store."""

    name = "separate"

    def __init__(self, data: Path) -> None:
        data.mkdir(parents=True, exist_ok=True)
        metadata = f"embedded://{data / 'metadata'}"
        self.procs: list[subprocess.Popen[str]] = []
        try:
            for i in range(BOOKIES):
                bookie = self._launch(
                    "bookie", "--metadata", metadata, "--data", str(data / f"bookie-{i}"), "--port", "0"
                )
                self._wait_for(bookie, r"bookie \S+ listening")
            args = ["broker", "--metadata", metadata, "--port", "0", "--web-port", "0", *QUORUMS]
            broker = self._launch(*args)
            self.url = self._wait_for(broker, r"Pulsar clients: (pulsar://\S+);").group(1)
        except BaseException:
            self.stop()
            raise
        self.broker_pid = broker.pid
        self.pids = [p.pid for p in self.procs]

    def _launch(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pulsar_ref.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, cwd=ROOT,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    @staticmethod
    def _wait_for(proc: subprocess.Popen[str], pattern: str) -> re.Match[str]:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(pattern, line)
        if not found:
            raise RuntimeError(f"{proc.args!r} did not start: {line!r}")
        return found

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the broker first, then the bookies
            proc.terminate()
            proc.wait(60)


class Peer(PulsarLite):
    def __init__(self, data: Path) -> None:
        super().__init__(data)
        self.broker_pid = self.proc.pid
        self.pids = [self.proc.pid]


Target = InProcess | Option | Separate | Peer
ARRANGEMENTS: dict[str, Callable[[Path], Target]] = {
    "in-process": InProcess,
    "option": Option,
    "separate": Separate,
    "pulsar-lite": Peer,
}


class Cpu:
    """CPU seconds of the broker's process and of all the arrangement's processes between two readings."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.broker, self.total = self._read()

    def _read(self) -> tuple[float, float]:
        return cpu_seconds(self.target.broker_pid), sum(cpu_seconds(p) for p in self.target.pids)

    def per_message(self, n: int) -> tuple[float, float]:
        """Microseconds per message of the broker's process and of all of them since the last reading."""
        broker, total = self._read()
        out = ((broker - self.broker) / n * 1e6, (total - self.total) / n * 1e6)
        self.broker, self.total = broker, total
        return out


def consume_backlog(client: pulsar.Client, n: int, target: Target) -> tuple[float, tuple[float, float]]:
    """bench_pulsar's consume row (unbatched), with the CPU read around the reads only, not the backlog's publish."""
    name = topic("backlog")
    consumer = client.subscribe(name, "bench", consumer_type=pulsar.ConsumerType.Shared)
    async_send(client, n, 1024, False, name)
    time.sleep(1)
    cpu = Cpu(target)
    start = time.perf_counter()
    for _ in range(n):
        consumer.acknowledge(consumer.receive(30_000))
    rate = n / (time.perf_counter() - start)
    time.sleep(0.5)  # the acks' last persist
    used = cpu.per_message(n)
    consumer.close()
    return rate, used


def run(arrangement: str, args: argparse.Namespace, work: Path, figures: dict[str, float]) -> list[str]:
    """One arrangement's rows, printed as a table; `figures` gets the figures the summary compares."""
    target = ARRANGEMENTS[arrangement](work / arrangement)
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    client = pulsar.Client(target.url, operation_timeout_seconds=60, logger=quiet)
    lines = [
        f"### {arrangement}",
        "",
        "| row | msg/s | p50 ms | p99 ms | broker process CPU us/msg | all processes CPU us/msg |",
        "|---|---|---|---|---|---|",
    ]
    try:
        with DiskProbe(work) as disk:
            cpu = Cpu(target)
            p50, p99, e50, e99 = fixed_rate(client, args.rate, args.seconds)
            b, t = cpu.per_message(int(args.rate * args.seconds))
            figures |= {"publish p50 ms": p50, "publish p99 ms": p99, "e2e p50 ms": e50}
            lines.append(
                f"| fixed {args.rate:,} msg/s, publish | {args.rate:,} | {p50:.2f} | {p99:.2f} | {b:.0f} | {t:.0f} |"
            )
            lines.append(f"| fixed {args.rate:,} msg/s, end-to-end | {args.rate:,} | {e50:.2f} | {e99:.2f} | | |")
        time.sleep(1)
        cpu = Cpu(target)
        rate = async_send(client, args.messages, 1024, False)
        b, t = cpu.per_message(args.messages)
        figures |= {"async unbatched msg/s": rate, "async: broker process us/msg": b}
        lines.append(f"| async unbatched 1 KiB ({args.messages:,}) | {rate:,.0f} | | | {b:.0f} | {t:.0f} |")
        time.sleep(1)
        rate, (b, t) = consume_backlog(client, args.backlog, target)
        figures |= {"consume msg/s": rate, "consume: broker process us/msg": b}
        lines.append(
            f"| consume unbatched ({args.backlog:,} backlog, Shared, acks) | {rate:,.0f} | | | {b:.0f} | {t:.0f} |"
        )
    finally:
        client.close()
        target.stop()
    lines += ["", f"{calibration()}; {disk.summary()}", ""]
    print("\n".join(lines), flush=True)
    return lines


def summary(rounds: list[dict[str, dict[str, float]]]) -> None:
    """Each figure's median per arrangement over the rounds, and the median of (option or separate) / in-process."""
    names = [n for r in rounds for a in r.values() for n in a]
    present = [a for a in ARRANGEMENTS if any(a in r for r in rounds)]
    apart = "option" if "option" in present else "separate"
    head = f"| figure | {' | '.join(present)} | {apart} / in-process (median of rounds; rounds higher) |"
    lines = ["## summary: medians over the rounds", "", head, "|---" * (len(present) + 2) + "|"]
    for name in dict.fromkeys(names):
        cells = []
        for arrangement in present:
            values = [r[arrangement][name] for r in rounds if name in r.get(arrangement, {})]
            cells.append(f"{statistics.median(values):,.2f}" if values else "")
        pairs = [
            r[apart][name] / r["in-process"][name]
            for r in rounds
            if name in r.get(apart, {}) and r.get("in-process", {}).get(name)
        ]
        higher = sum(1 for x in pairs if x > 1)
        ratio = f"{statistics.median(pairs):.2f}; {higher} of {len(pairs)}" if pairs else ""
        lines.append(f"| {name} | {' | '.join(cells)} | {ratio} |")
    print("\n".join([*lines, "", calibration(), ""]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--arrangements",
        nargs="+",
        choices=list(ARRANGEMENTS),
        default=["in-process", "separate", "pulsar-lite"],
        help="what to run each round (in-process separate pulsar-lite; option: `standalone --bookie-processes`)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each round runs every arrangement fresh (3)")
    parser.add_argument("--messages", type=int, default=20_000, help="messages of the async row (20,000)")
    parser.add_argument("--backlog", type=int, default=20_000, help="backlog of the consume row (20,000)")
    parser.add_argument("--rate", type=int, default=1000, help="fixed-rate row: messages per second (1,000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="fixed-rate row: seconds (10)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-standalone-bookies-"))
    print(f"command: {' '.join(sys.argv)}\n{calibration()}\n", flush=True)
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        for round_ in range(args.rounds):
            # alternate which of ours goes first, so that drift of the machine's load favours neither
            order = list(args.arrangements)
            if round_ % 2 and "in-process" in order and "separate" in order:
                i, j = order.index("in-process"), order.index("separate")
                order[i], order[j] = order[j], order[i]
            print(f"## round {round_ + 1}: {calibration()}\n", flush=True)
            rounds.append({arrangement: {} for arrangement in order})
            for arrangement in order:
                run(arrangement, args, work / f"round-{round_}", rounds[-1][arrangement])
        summary(rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
