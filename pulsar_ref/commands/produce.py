"""`pulsar-ref produce TOPIC -m MSG [-n N]`: publish messages, as pulsar-client produce does."""

from __future__ import annotations

import argparse
import sys

DEFAULT_SERVICE = "pulsar://127.0.0.1:6650"


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(prog=prog, description="Publish messages to a topic; prints each message id.")
    parser.add_argument("topic", help="topic name, e.g. persistent://public/default/t0 or just t0")
    parser.add_argument("-m", "--messages", action="append", required=True, help="message text (repeatable)")
    parser.add_argument("-n", "--num-produce", type=int, default=1, help="send the messages this many times")
    parser.add_argument("-k", "--key", default="", help="message key (Key_Shared routing)")
    parser.add_argument("--batching", action="store_true", help="send as client-side batches")
    parser.add_argument("--service-url", default=DEFAULT_SERVICE, help=f"broker(s) to ask (default {DEFAULT_SERVICE})")
    args = parser.parse_args(argv)
    if args.num_produce < 1:
        parser.error("-n must be at least 1")

    from impl.client import Client, ClientError

    try:
        with Client(args.service_url) as client:
            producer = client.create_producer(args.topic, batching=args.batching)
            futures = []
            for _ in range(args.num_produce):
                for text in args.messages:
                    futures.append(producer.send_async(text.encode(), key=args.key))
            producer.flush()
            for f in futures:
                mid = f.result(timeout=client.timeout_s + 5)
                print(f"{mid.ledger_id}:{mid.entry_id}:{mid.batch_index}")
    except ClientError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(futures)} messages produced to {args.topic}", file=sys.stderr)
    return 0
