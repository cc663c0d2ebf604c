"""Per-call costs that bound the broker's unbatched publish rate in CPython with grpcio.

Measures, in this process (CPU time per operation):
  future       a concurrent.futures.Future created, given a done-callback and completed
  hop          handing an item to another thread over a queue.SimpleQueue and back (a round trip)
  grpc unary   a unary gRPC call to a trivial handler on 127.0.0.1 (wall time per call, client+server
               in one process): the bookie protocol's ReadLac (impl/bookie/bookie.proto), gRPC being
               what brokers and bookies speak (clients reach brokers over Pulsar's protocol)
  bookie add   one BookKeeper add (E2/Qw2/Qa2) to two in-process bookies through the real client,
               pipelined 1,000 at a time (CPU of the whole process per add: client, transport, bookies)

    .venv/bin/python bench/bench_percall.py
"""

from __future__ import annotations

import queue
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc  # noqa: E402
from results_log import append, calibration, row  # noqa: E402

from impl.bookie import bookie_pb2 as pb  # noqa: E402
from impl.bookie import bookie_pb2_grpc as pb_grpc  # noqa: E402


def per_op(n: int, body: object) -> float:
    start = time.process_time()
    body()  # type: ignore[operator]
    return (time.process_time() - start) / n * 1e6


def future_cost(n: int = 100_000) -> float:
    def body() -> None:
        for _ in range(n):
            f: futures.Future[int] = futures.Future()
            f.add_done_callback(lambda _f: None)
            f.set_result(1)

    return per_op(n, body)


def hop_cost(n: int = 20_000) -> float:
    there: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    back: queue.SimpleQueue[int] = queue.SimpleQueue()

    def echo() -> None:
        while (item := there.get()) is not None:
            back.put(item)

    t = threading.Thread(target=echo)
    t.start()

    def body() -> None:
        for i in range(n):
            there.put(i)
            back.get()

    cost = per_op(n, body)
    there.put(None)
    t.join()
    return cost


class _Echo(pb_grpc.BookieServicer):
    def ReadLac(self, request: pb.ReadLacReq, context: object) -> pb.ReadLacResp:
        return pb.ReadLacResp(ledger_id=request.ledger_id, lac=-1)


def grpc_unary_cost(n: int = 3000) -> float:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_BookieServicer_to_server(_Echo(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.BookieStub(channel)
            stub.ReadLac(pb.ReadLacReq(ledger_id=1))
            start = time.perf_counter()
            for _ in range(n):
                stub.ReadLac(pb.ReadLacReq(ledger_id=1))
            return (time.perf_counter() - start) / n * 1e6
    finally:
        server.stop(0).wait()


def bookie_add_cost(n: int = 5000) -> float:
    from impl.bookie.client.api import BookKeeperClient
    from impl.bookie.client.pipelined_transport import PipelinedTransport
    from impl.bookie.server import Bookie, BookieServer
    from impl.metadata.ledger_store import LedgerMetadataStore
    from impl.metadata.memory import MemoryServer
    from impl.metadata.registry import BookieRegistry

    data = Path(tempfile.mkdtemp(prefix="bench-percall-"))
    store = MemoryServer().connect()
    registry = BookieRegistry(store)
    servers = []
    for i in range(2):
        server = BookieServer(Bookie(data / f"b{i}"))
        server.start()
        servers.append(server)
        registry.register(f"127.0.0.1:{server.port}")
    client = BookKeeperClient(LedgerMetadataStore(store), registry, PipelinedTransport(), seed=1)
    try:
        handle = client.create_ledger(2, 2, 2)
        handle.add(b"warm")
        payload = b"x" * 100
        done = threading.Semaphore(0)

        def body() -> None:
            for start in range(0, n, 1000):
                count = min(1000, n - start)
                handle.add_many_with_callback([(payload, lambda _o: done.release())] * count)
                for _ in range(count):
                    done.acquire()

        return per_op(n, body)
    finally:
        client.close()
        for server in servers:
            server.stop()


def main() -> None:
    rows = [
        ("future: create, add a done-callback, complete", future_cost(), "CPU"),
        ("thread hop: SimpleQueue to another thread and back", hop_cost(), "CPU"),
        ("gRPC unary call (bookie ReadLac), trivial handler, one process", grpc_unary_cost(), "wall"),
        ("BookKeeper add E2/Qw2/Qa2, in-process bookies, 1,000 in flight", bookie_add_cost(), "CPU"),
    ]
    print("| operation | us per operation | measured as |")
    print("|---|---:|---|")
    for name, cost, kind in rows:
        print(f"| {name} | {cost:,.1f} | {kind} |")
    line = calibration()
    print(f"\n{line}")
    append("percall", [row(name, cost, f"us {kind}") for name, cost, kind in rows], calibration=line)


if __name__ == "__main__":
    main()
