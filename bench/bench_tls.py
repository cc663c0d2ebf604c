"""Publishing with TLS and tokens against plaintext, in one run, with the official client.

Two `pulsar-ref standalone` processes (E2/Qw2/Qa2): one plain (pulsar://, no authentication), one
`--secure` (TLS, token authentication and authorization on). Three ways, each row on each in
alternation, on topics of their own:
  plain    the plain standalone's pulsar:// listener
  token    the secure standalone's pulsar:// listener, with the super-user's token (no TLS)
  secure   the secure standalone's pulsar+ssl:// listener, with the token and the CA it made
The ratio column is secure / plain.

Rows (1 KiB):
  fixed rate        --rate msg/s for --seconds, unbatched, one consumer: publish latency p50/p99;
                    after a 2-second warm-up on each, two rounds in alternation
  async unbatched   up to 1,000 outstanding sends                     (target: >= 70% of plaintext)
  async batched     client-side batching (1,000 messages or 10 ms)     (target: >= 70% of plaintext)

The table ends with a calibration line from the same run (a fixed pure-Python loop, the load average).

`--alone WAY` runs only the fixed-rate row, four times, on one way with only its own standalone
running and only its own client: the rows above run one after another, and the order of the ways
shows in their latencies.

    .venv/bin/python bench/bench_tls.py [--messages 20000] [--rate 1000] [--seconds 10]
    .venv/bin/python bench/bench_tls.py --alone token|secure|plain [--seconds 6]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pulsar  # noqa: E402
from bench_pulsar import Standalone, async_send, calibration, fixed_rate  # noqa: E402
from results_log import append  # noqa: E402
from results_log import row as record_row  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages per publish row (20,000)")
    parser.add_argument("--rate", type=int, default=1000, help="fixed-rate row: messages per second (1,000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="fixed-rate row: seconds (10)")
    parser.add_argument("--alone", choices=("plain", "token", "secure"), help="one way on its own (see above)")
    args = parser.parse_args()
    print(f"command: {' '.join(sys.argv)}\n{calibration()}\n", flush=True)
    if args.alone:
        return alone(args)
    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    plain = Standalone(work / "plain")
    secure = Standalone(work / "secure", "--secure", "--tls-port", "0", "--web-tls-port", "0")
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    try:
        clients = {
            "plain": pulsar.Client(plain.url, operation_timeout_seconds=60, logger=quiet),
            "token": pulsar.Client(
                secure.url,
                authentication=pulsar.AuthenticationToken(secure.token),
                operation_timeout_seconds=60,
                logger=quiet,
            ),
            "secure": pulsar.Client(
                secure.tls_url,
                authentication=pulsar.AuthenticationToken(secure.token),
                tls_trust_certs_file_path=secure.trust,
                tls_validate_hostname=True,
                operation_timeout_seconds=60,
                logger=quiet,
            ),
        }
        ways = ("plain", "token", "secure")
        results: dict[str, dict[str, tuple[float, ...]]] = {way: {} for way in ways}
        try:
            for way in ways:
                fixed_rate(clients[way], args.rate, 2.0)  # warm-up: first ledgers, lookups, handshakes
            for round_ in (1, 2):
                for way in ways:
                    results[way][f"fixed {round_}"] = fixed_rate(clients[way], args.rate, args.seconds)
            for row, batching in (("async unbatched", False), ("async batched 1 KiB", True)):
                for way in ways:
                    results[way][row] = (async_send(clients[way], args.messages, 1024, batching),)
        finally:
            for client in clients.values():
                client.close()
    finally:
        plain.stop()
        secure.stop()
        shutil.rmtree(work, ignore_errors=True)

    p, t, s = results["plain"], results["token"], results["secure"]
    lines = [
        "### TLS and tokens against plaintext: two standalone processes (E2/Qw2/Qa2), the official client",
        "",
        "| row | plaintext | token, no TLS | TLS + token | secure / plain | target |",
        "|---|---|---|---|---|---|",
    ]
    for round_ in (1, 2):
        key = f"fixed {round_}"
        row = f"fixed {args.rate:,} msg/s, round {round_}, publish"
        for i, name in ((0, "p50"), (1, "p99")):
            plain_ms, token_ms, secure_ms = p[key][i], t[key][i], s[key][i]
            lines.append(
                f"| {row} {name} ms | {plain_ms:.2f} | {token_ms:.2f} | {secure_ms:.2f} | "
                f"{secure_ms - plain_ms:+.2f} ms | |"
            )
    for row in ("async unbatched", "async batched 1 KiB"):
        plain_rate, token_rate, secure_rate = p[row][0], t[row][0], s[row][0]
        lines.append(
            f"| {row} msg/s | {plain_rate:,.0f} | {token_rate:,.0f} | {secure_rate:,.0f} | "
            f"{secure_rate / plain_rate:.0%} | >= 70% |"
        )
    end = calibration()
    lines += ["", end, ""]
    print("\n".join(lines), flush=True)
    records = [
        record_row(f"TLS + token: {name}", s[name][0], "msg/s", "plaintext", p[name][0])
        for name in ("async unbatched", "async batched 1 KiB")
    ]
    append("tls", records, calibration=end)
    return 0


def alone(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    secure = args.alone != "plain"
    options = ("--secure", "--tls-port", "0", "--web-tls-port", "0") if secure else ()
    standalone = Standalone(work / "standalone", *options)
    auth = pulsar.AuthenticationToken(standalone.token) if secure else None
    url = standalone.tls_url if args.alone == "secure" else standalone.url
    trust = standalone.trust if args.alone == "secure" else None
    lines = [
        f"### {args.alone} alone: one standalone (E2/Qw2/Qa2), fixed {args.rate:,} msg/s, {args.seconds:g} s rows",
        "",
        "| row | publish p50 ms | publish p99 ms |",
        "|---|---|---|",
    ]
    client = pulsar.Client(
        url,
        authentication=auth,
        tls_trust_certs_file_path=trust,
        operation_timeout_seconds=60,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        for row in range(1, 5):
            p50, p99 = fixed_rate(client, args.rate, args.seconds)[:2]
            lines.append(f"| {row} | {p50:.2f} | {p99:.2f} |")
    finally:
        client.close()
        standalone.stop()
        shutil.rmtree(work, ignore_errors=True)
    lines += ["", calibration(), ""]
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
