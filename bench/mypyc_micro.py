"""Per-message costs of the hot pure-Python modules, to compare them compiled (mypyc) and not.

Issue 46 item 5 (bench/history/pulsar.md, "Issue 46 item 5: mypyc"). Times, in this process, CPU
microseconds per message of:
  parse_header   entry_codec.parse_header of a 1 KiB SEND (CRC checked), what the publish path does
  messages_of    dispatcher.messages_of of a 1 KiB entry (no payloads, no keys), what a read does
  encode MESSAGE frames.encode of a prebuilt MESSAGE command and a 1 KiB entry
  decode ACK     FrameDecoder.feed of one ACK frame (the consumer's acknowledgement of one message)
  dispatch       Dispatcher (Shared): Flow, EntriesRead of 100 messages, each acked alone; per message
  cursor ack     CursorState.delete of one position, acked in order (the mark-delete moves each time)
  cursor gap     CursorState.delete of every other of 2,000 positions (ranges grow), then the rest

Which modules were imported compiled is printed first: a `.so` beside the `.py` (from
`mypyc impl/protocol/entry_codec.py impl/protocol/frames.py impl/broker/dispatcher.py
impl/broker/cursor_core.py`) is what Python imports; without it the `.py` runs. Writes no record.

    .venv/bin/python bench/mypyc_micro.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from impl.broker import cursor_core, dispatcher  # noqa: E402
from impl.broker.ledger_list import Position, TopicView  # noqa: E402
from impl.protocol import entry_codec, frames  # noqa: E402
from impl.protocol import pulsar_api_pb2 as api  # noqa: E402
from impl.protocol.message_id import MessageId  # noqa: E402

N = 20_000


def per_op(n: int, body: Callable[[], object]) -> float:
    start = time.process_time()
    body()
    return (time.process_time() - start) / n * 1e6


def entry() -> bytes:
    meta = api.MessageMetadata(producer_name="bench-0", sequence_id=7, publish_time=1_700_000_000_000)
    return entry_codec.build(meta, b"x" * 1024)


def bench_parse_header(data: bytes) -> float:
    def body() -> None:
        for _ in range(N):
            entry_codec.parse_header(data)

    return per_op(N, body)


def bench_messages_of(data: bytes) -> float:
    p = Position(3, 7)

    def body() -> None:
        for _ in range(N):
            dispatcher.messages_of(p, data, payloads=False, keys_needed=False)

    return per_op(N, body)


def bench_encode(data: bytes) -> float:
    msg = api.CommandMessage(consumer_id=1, message_id=api.MessageIdData(ledgerId=3, entryId=7))
    command = api.BaseCommand(type=api.BaseCommand.MESSAGE, message=msg)

    def body() -> None:
        for _ in range(N):
            frames.encode(command, data)

    return per_op(N, body)


def bench_decode_ack() -> float:
    ack = api.CommandAck(consumer_id=1, ack_type=api.CommandAck.Individual)
    ack.message_id.add(ledgerId=3, entryId=7)
    frame = frames.encode(api.BaseCommand(type=api.BaseCommand.ACK, ack=ack))
    decoder = frames.FrameDecoder()

    def body() -> None:
        for _ in range(N):
            decoder.feed(frame)

    return per_op(N, body)


def bench_dispatch(data: bytes) -> float:
    d = dispatcher.Dispatcher(dispatcher.SubscriptionType.SHARED)
    d.step(dispatcher.AddConsumer(1, "a"))
    rounds, batch = N // 100, 100

    def body() -> None:
        entry_id = 0
        for _ in range(rounds):
            d.step(dispatcher.Flow(1, batch))
            ids = [MessageId(1, entry_id + i) for i in range(batch)]
            messages = tuple(dispatcher.Message(mid, "", b"", entry=data) for mid in ids)
            d.step(dispatcher.EntriesRead(messages))
            for mid in ids:
                d.step(dispatcher.Ack(1, (mid,)))
            entry_id += batch

    return per_op(rounds * batch, body)


def bench_cursor(gaps: bool) -> float:
    n = 2_000 if gaps else N  # with gaps an ack costs in proportion to the ranges held
    view = TopicView(((3, n),), open_ledger=3)
    order = [*range(1, n, 2), *range(0, n, 2)] if gaps else list(range(n))

    def body() -> None:
        state = cursor_core.CursorState(Position(3, -1))
        for i in order:
            state.delete([Position(3, i)], view)
        assert state.mark_delete == Position(3, n - 1)

    return per_op(n, body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    compiled = {m.__name__: m.__file__ is not None and m.__file__.endswith(".so")
                for m in (entry_codec, frames, dispatcher, cursor_core)}  # fmt: skip
    print("compiled:", ", ".join(f"{name.rsplit('.', 1)[1]}={yes}" for name, yes in compiled.items()))
    data = entry()
    rows: dict[str, Callable[[], float]] = {
        "parse_header": lambda: bench_parse_header(data),
        "messages_of": lambda: bench_messages_of(data),
        "encode MESSAGE": lambda: bench_encode(data),
        "decode ACK": bench_decode_ack,
        "dispatch": lambda: bench_dispatch(data),
        "cursor ack": lambda: bench_cursor(False),
        "cursor gap": lambda: bench_cursor(True),
    }
    for name, run in rows.items():
        times = [run() for _ in range(args.rounds)]
        print(f"{name:15s} median {statistics.median(times):6.2f} us  min {min(times):6.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
