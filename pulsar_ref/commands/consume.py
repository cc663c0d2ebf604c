"""`pulsar-ref consume TOPIC -s SUB [-n N]`: receive and acknowledge messages."""

from __future__ import annotations

import argparse
import sys

from pulsar_ref.commands.produce import DEFAULT_SERVICE


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Consume messages from a subscription, acknowledging each; prints id and text."
    )
    parser.add_argument("topic", help="topic name, e.g. persistent://public/default/t0 or just t0")
    parser.add_argument("-s", "--subscription", required=True, help="subscription name")
    parser.add_argument("-n", "--num-messages", type=int, default=1, help="stop after N messages (0 = forever)")
    parser.add_argument(
        "-t", "--subscription-type", default="Exclusive", choices=["Exclusive", "Shared", "Failover", "Key_Shared"]
    )
    parser.add_argument(
        "-p",
        "--position",
        default="latest",
        choices=["earliest", "latest"],
        help="where a new subscription starts (default latest)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="give up after this many seconds without a message")
    parser.add_argument("--service-url", default=DEFAULT_SERVICE, help=f"broker(s) to ask (default {DEFAULT_SERVICE})")
    args = parser.parse_args(argv)

    from impl.client import Client, ClientError

    received = 0
    try:
        with Client(args.service_url) as client:
            consumer = client.subscribe(
                args.topic,
                args.subscription,
                subscription_type=args.subscription_type,
                initial_position=args.position,
            )
            try:
                while args.num_messages == 0 or received < args.num_messages:
                    msg = consumer.receive(timeout_s=args.timeout)
                    mid = f"{msg.id.ledger_id}:{msg.id.entry_id}:{msg.id.batch_index}"
                    print(f"{mid} {msg.data.decode(errors='replace')}")
                    consumer.acknowledge(msg)
                    received += 1
            finally:
                consumer.close()
    except TimeoutError as e:
        print(f"error: {e} ({received} received)", file=sys.stderr)
        return 1
    except ClientError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{received} messages consumed from {args.topic}", file=sys.stderr)
    return 0
