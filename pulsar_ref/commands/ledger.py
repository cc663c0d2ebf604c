"""`pulsar-ref ledger`: the BookKeeper client from the command line, over real bookies.

    pulsar-ref ledger --metadata URL create -E 3 -Qw 3 -Qa 2 --password pw
    pulsar-ref ledger --metadata URL write --count 100 --password pw        (creates, writes, leaves OPEN)
    pulsar-ref ledger --metadata URL lac 7 --password pw                    (no fencing)
    pulsar-ref ledger --metadata URL recover 7 --password pw                (fences the writer, closes)
    pulsar-ref ledger --metadata URL --read-ahead 2048 recover 7            (reads 2,048 entries at once)
    pulsar-ref ledger --metadata URL read 7 0 99 --password pw
    pulsar-ref ledger --metadata URL list | show 7 | close 7 | delete 7

A ledger has exactly one writer, the client that created it, so `write` creates the
ledger it writes to (there is no "append to ledger N"). A ledger whose writer is gone
is closed by recovery; `close` therefore is recovery under another name.
Typed failures (fenced, unauthorised, no such ledger, not enough bookies, metadata
conflicts, timeouts) print one actionable line and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from impl.bookie.client.api import BookKeeperClient
from impl.bookie.client.errors import LedgerClientError, PlacementError
from impl.metadata.ledger import DigestType, LedgerMetadata
from impl.metadata.store import MetadataError

ENV_URL = "PULSAR_REF_METADATA_URL"

Command = Callable[[BookKeeperClient, argparse.Namespace], None]


class UsageError(Exception):
    """Arguments that parse but make no sense together (e.g. a payload and --count)."""


# ---- rendering ------------------------------------------------------------------------------------------


def render_payload(data: bytes, as_hex: bool) -> str:
    if as_hex:
        return data.hex()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"0x{data.hex()}"
    return text if text.isprintable() else repr(text)


def describe(ledger_id: int, md: LedgerMetadata) -> str:
    last = f" last_entry={md.last_entry_id} length={md.length}" if md.is_closed else ""
    return (
        f"ledger {ledger_id}: {md.state.value}{last} E={md.ensemble_size} Qw={md.write_quorum} "
        f"Qa={md.ack_quorum} digest={md.digest_type.value}"
    )


def describe_fragments(md: LedgerMetadata) -> list[str]:
    return [f"  fragment from entry {f.first_entry_id}: {' '.join(f.ensemble)}" for f in md.fragments]


# ---- subcommands ------------------------------------------------------------------------------------------


def cmd_create(client: BookKeeperClient, args: argparse.Namespace) -> None:
    handle = client.create_ledger(*quorums(args), digest=args.digest, password=password(args))
    print(describe(handle.ledger_id, handle.metadata))
    print("\n".join(describe_fragments(handle.metadata)))


def cmd_write(client: BookKeeperClient, args: argparse.Namespace) -> None:
    if args.payloads and args.count is not None:
        raise UsageError("give either payloads or --count, not both")
    if args.payloads:
        payloads = [p.encode("utf-8") for p in args.payloads]
    else:
        count = 10 if args.count is None else args.count
        if count < 0 or args.size < 0:
            raise UsageError("--count and --size must be >= 0")
        payloads = [entry_payload(i, args.size) for i in range(count)]
    handle = client.create_ledger(*quorums(args), digest=args.digest, password=password(args))
    print(f"ledger {handle.ledger_id} created on {' '.join(handle.metadata.last_ensemble)}", flush=True)
    # Pipelined: at most --outstanding adds in flight; completions arrive in entry order.
    futures = []
    for i, payload in enumerate(payloads):
        futures.append(handle.add_async(payload))
        if i + 1 >= args.outstanding:
            futures[i + 1 - args.outstanding].result(timeout=client.timeout_s)
    for future in futures:
        future.result(timeout=client.timeout_s)
    print(f"ledger {handle.ledger_id}: wrote {len(payloads)} entries, last_add_confirmed={handle.last_add_confirmed}")
    if args.close:
        closed = handle.close()
        assert closed is not None
        print(describe(handle.ledger_id, closed))
    else:
        print(f"ledger {handle.ledger_id} left OPEN (its writer exits now); `recover {handle.ledger_id}` closes it")


def entry_payload(index: int, size: int) -> bytes:
    """`entry-<i>`, padded with '.' to `size` bytes when --size is larger."""
    text = f"entry-{index}".encode()
    return text + b"." * (size - len(text)) if size > len(text) else text


def cmd_read(client: BookKeeperClient, args: argparse.Namespace) -> None:
    reader = client.open_ledger(args.ledger_id, password(args), recovery=args.recover)
    lac = reader.read_last_confirmed()
    last = lac if args.last is None else args.last
    if lac < 0:
        print(
            f"ledger {args.ledger_id}: no confirmed entries known to the bookies yet "
            "(an open ledger's LAC reaches them only with later entries); `read --recover` closes it first",
            file=sys.stderr,
        )
        return
    if args.first > last:
        raise UsageError(f"first entry {args.first} is after last entry {last}")
    for entry in reader.read(args.first, last):
        print(f"{entry.entry_id}\t{render_payload(entry.payload, args.hex)}")


def cmd_lac(client: BookKeeperClient, args: argparse.Namespace) -> None:
    reader = client.open_ledger(args.ledger_id, password(args), recovery=False)
    print(reader.read_last_confirmed())


def cmd_recover(client: BookKeeperClient, args: argparse.Namespace) -> None:
    reader = client.open_ledger(args.ledger_id, password(args), recovery=True)
    print(describe(args.ledger_id, reader.metadata))


def cmd_show(client: BookKeeperClient, args: argparse.Namespace) -> None:
    metadata, version = client.ledgers.read(args.ledger_id)
    print(f"{describe(args.ledger_id, metadata)} version={version}")
    print("\n".join(describe_fragments(metadata)))
    for key, value in sorted(metadata.custom_metadata.items()):
        print(f"  {key} = {render_payload(value, as_hex=False)}")


def cmd_delete(client: BookKeeperClient, args: argparse.Namespace) -> None:
    client.delete_ledger(args.ledger_id)
    print(f"ledger {args.ledger_id} deleted")


def cmd_list(client: BookKeeperClient, args: argparse.Namespace) -> None:
    for ledger_id in client.ledgers.ledger_ids():
        if args.long:
            print(describe(ledger_id, client.ledgers.read(ledger_id)[0]))
        else:
            print(ledger_id)


def quorums(args: argparse.Namespace) -> tuple[int, int, int]:
    write_quorum = args.ensemble if args.write_quorum is None else args.write_quorum
    ack_quorum = min(2, write_quorum) if args.ack_quorum is None else args.ack_quorum
    if not 1 <= ack_quorum <= write_quorum <= args.ensemble:
        raise UsageError(f"need 1 <= Qa <= Qw <= E, got E={args.ensemble} Qw={write_quorum} Qa={ack_quorum}")
    return args.ensemble, write_quorum, ack_quorum


def password(args: argparse.Namespace) -> bytes:
    encoded: bytes = args.password.encode("utf-8")
    return encoded


# ---- parser ------------------------------------------------------------------------------------------------


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="A ledger has one writer, its creator: `write` creates the ledger it writes. "
        "Typed failures exit 2 with a one-line reason.",
    )
    parser.add_argument(
        "--metadata",
        default=os.environ.get(ENV_URL),
        help=f"metadata store URL: embedded:///ABS/DIR or zk://HOST:PORT[/CHROOT] (default: ${ENV_URL})",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per operation (default 30)")
    parser.add_argument("--request-timeout", type=float, default=5.0, help="seconds a bookie may take (default 5)")
    parser.add_argument(
        "--read-ahead",
        type=int,
        default=1,
        help="entries a recovery reads at once (default 1, BookKeeper's; thousands recover a long "
        "unconfirmed tail far faster: bench/history/client.md)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")

    def add(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    def with_password(p: argparse.ArgumentParser) -> None:
        p.add_argument("--password", default="", help="the ledger's password (default: empty)")

    def with_ledger(p: argparse.ArgumentParser) -> None:
        p.add_argument("ledger_id", type=int, metavar="LEDGER", help="ledger id")

    def with_layout(p: argparse.ArgumentParser) -> None:
        p.add_argument("-E", "--ensemble", type=int, default=3, help="ensemble size E (default 3)")
        p.add_argument("-Qw", "--write-quorum", type=int, help="write quorum Qw (default E)")
        p.add_argument("-Qa", "--ack-quorum", type=int, help="ack quorum Qa (default min(2, Qw))")
        p.add_argument(
            "--digest", default="crc32c", choices=[d.value for d in DigestType], help="entry digest (default crc32c)"
        )
        with_password(p)

    with_layout(add("create", cmd_create, "create an empty ledger and print its id and ensemble"))

    p = add("write", cmd_write, "create a ledger and add entries to it (payloads, or --count generated ones)")
    with_layout(p)
    p.add_argument("payloads", nargs="*", metavar="PAYLOAD", help="entries to add, as UTF-8 text")
    p.add_argument("--count", type=int, help="add N generated entries `entry-<i>` (default 10 without payloads)")
    p.add_argument("--size", type=int, default=0, help="pad generated entries to this many bytes")
    p.add_argument("--outstanding", type=int, default=100, help="adds in flight at once (default 100)")
    p.add_argument("--close", action="store_true", help="close the ledger after writing (default: leave it OPEN)")

    p = add("read", cmd_read, "print entries FIRST..LAST (default: all confirmed), one `id<TAB>payload` a line")
    with_ledger(p)
    p.add_argument("first", type=int, nargs="?", default=0, metavar="FIRST", help="first entry (default 0)")
    p.add_argument("last", type=int, nargs="?", metavar="LAST", help="last entry (default: last confirmed)")
    p.add_argument("--recover", action="store_true", help="open with recovery first (fences the writer)")
    p.add_argument("--hex", action="store_true", help="print payloads as hex")
    with_password(p)

    p = add("lac", cmd_lac, "print the last add confirmed, read from the bookies without fencing")
    with_ledger(p)
    with_password(p)
    p = add("recover", cmd_recover, "open with recovery: fence the writer, close at the recovered last entry")
    with_ledger(p)
    with_password(p)
    p = add("close", cmd_recover, "close a ledger whose writer is gone (that is recovery: it fences the writer)")
    with_ledger(p)
    with_password(p)
    with_ledger(add("show", cmd_show, "print a ledger's metadata: state, quorums, fragments"))
    with_ledger(add("delete", cmd_delete, "delete a ledger's metadata (bookies garbage-collect its entries)"))
    p = add("list", cmd_list, "list ledger ids")
    p.add_argument("-l", "--long", action="store_true", help="also print each ledger's state and quorums")
    return parser


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    if not args.metadata:
        print(f"{prog}: give --metadata URL (or set ${ENV_URL}), e.g. embedded:///var/pulsar-ref", file=sys.stderr)
        return 2
    from impl.bookie.client.connect import connect_bookkeeper
    from impl.metadata.url import connect

    try:
        store = connect(args.metadata)
    except MetadataError as e:
        print(f"{prog}: cannot open metadata store {args.metadata}: {e}", file=sys.stderr)
        return 2
    try:
        client = connect_bookkeeper(
            store,
            timeout_s=args.timeout,
            request_timeout_s=args.request_timeout,
            recovery_read_ahead=args.read_ahead,
        )
        try:
            args.func(client, args)
        finally:
            client.close()
    except (LedgerClientError, PlacementError, MetadataError, UsageError, ValueError) as e:
        print(f"{prog} {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except TimeoutError as e:
        print(f"{prog} {args.command}: timed out: {e}", file=sys.stderr)
        return 2
    finally:
        store.close()
    return 0
