"""`pulsar-ref metadata`: inspect and edit a metadata store (zk://, embedded:// or memory://)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from impl.metadata.store import ANY_VERSION, MetadataError, MetadataStore, NoNode, Stat

ENV_URL = "PULSAR_REF_METADATA_URL"


def default_url() -> str:
    return os.environ.get(ENV_URL) or f"embedded://{Path.cwd() / 'var' / 'metadata'}"


def render_data(data: bytes) -> str:
    """Text if the bytes are printable UTF-8, else hex (use --raw for the exact bytes)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(data)} bytes, not UTF-8> 0x{data.hex()}"
    if not all(c.isprintable() or c in "\n\t\r" for c in text):
        return f"<{len(data)} bytes> 0x{data.hex()}"
    return text


def render_stat(path: str, stat: Stat) -> str:
    return "\n".join(
        [
            f"path            {path}",
            f"version         {stat.version}",
            f"cversion        {stat.cversion}",
            f"czxid           {stat.czxid}",
            f"mzxid           {stat.mzxid}",
            f"ephemeral_owner {stat.ephemeral_owner}",
            f"data_length     {stat.data_length}",
            f"num_children    {stat.num_children}",
        ]
    )


def child_path(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def read_data(arg: str | None) -> bytes:
    if arg is None:
        return b""
    if arg == "-":
        return sys.stdin.buffer.read()
    return arg.encode("utf-8")


def cmd_ls(store: MetadataStore, args: argparse.Namespace) -> None:
    for name in store.children(args.path):
        print(name)


def cmd_tree(store: MetadataStore, args: argparse.Namespace) -> None:
    def walk(path: str, depth: int) -> None:
        data, stat = store.get(path)
        label = path if depth == 0 else path.rsplit("/", 1)[1]
        extra = f"  ({stat.data_length} bytes, v{stat.version}{', ephemeral' if stat.ephemeral_owner else ''})"
        print("  " * depth + label + (extra if args.stat else ""))
        for name in store.children(path):
            walk(child_path(path, name), depth + 1)

    walk(args.path, 0)


def cmd_get(store: MetadataStore, args: argparse.Namespace) -> None:
    data, stat = store.get(args.path)
    if args.raw:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    print(render_data(data))
    if args.stat:
        print(render_stat(args.path, stat))


def cmd_set(store: MetadataStore, args: argparse.Namespace) -> None:
    stat = store.set(args.path, read_data(args.data), args.version)
    print(f"{args.path} now at version {stat.version}")


def cmd_create(store: MetadataStore, args: argparse.Namespace) -> None:
    if args.parents:
        parent = args.path.rsplit("/", 1)[0]
        if parent:
            store.ensure_path(parent)
    print(store.create(args.path, read_data(args.data), sequential=args.sequential))


def cmd_delete(store: MetadataStore, args: argparse.Namespace) -> None:
    def remove(path: str, version: int) -> None:
        if args.recursive:
            for name in store.children(path):
                remove(child_path(path, name), ANY_VERSION)
        store.delete(path, version)

    remove(args.path, args.version)
    print(f"deleted {args.path}")


def cmd_stat(store: MetadataStore, args: argparse.Namespace) -> None:
    stat = store.exists(args.path)
    if stat is None:
        raise NoNode(f"cannot stat {args.path}: it does not exist", args.path)
    print(render_stat(args.path, stat))


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Inspect and edit a metadata store with ZooKeeper's semantics.",
        epilog=(
            "URLs: embedded:///ABSOLUTE/DIR (durable SQLite store), zk://HOST:PORT[,HOST:PORT...][/CHROOT] "
            "(a real ZooKeeper), memory://NAME (in-process only, so empty for this command). "
            "Errors print one line naming the failure (e.g. BADVERSION, NONODE) and exit 1."
        ),
    )
    parser.add_argument(
        "--url",
        default=None,
        help=f"metadata store URL (default: ${ENV_URL} if set, else embedded://<current dir>/var/metadata)",
    )
    parser.add_argument("--session-timeout", type=float, default=10.0, help="session timeout in seconds (default: 10)")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    def add(name: str, func: Callable[[MetadataStore, argparse.Namespace], None], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        return p

    p = add("ls", cmd_ls, "list the children of a node")
    p.add_argument("path")
    p = add("tree", cmd_tree, "print the sub-tree under a node")
    p.add_argument("path", nargs="?", default="/")
    p.add_argument("--stat", action="store_true", help="show each node's size, version and whether it is ephemeral")
    p = add("get", cmd_get, "print a node's data (as text if UTF-8, else hex)")
    p.add_argument("path")
    p.add_argument("--stat", action="store_true", help="also print the node's stat")
    p.add_argument("--raw", action="store_true", help="write the exact bytes to stdout")
    p = add("set", cmd_set, "write a node's data, optionally only if it is at --version")
    p.add_argument("path")
    p.add_argument("data", help="new data as text, or - to read bytes from stdin")
    p.add_argument("--version", type=int, default=ANY_VERSION, help="expected version (default: -1, any)")
    p = add("create", cmd_create, "create a persistent node and print its path")
    p.add_argument("path")
    p.add_argument("data", nargs="?", default=None, help="data as text, or - to read bytes from stdin (default: empty)")
    p.add_argument("--sequential", action="store_true", help="append the parent's 10-digit sequence number")
    p.add_argument("-p", "--parents", action="store_true", help="create missing parents as empty nodes")
    p = add("delete", cmd_delete, "delete a node, optionally only if it is at --version")
    p.add_argument("path")
    p.add_argument("--version", type=int, default=ANY_VERSION, help="expected version (default: -1, any)")
    p.add_argument("-r", "--recursive", action="store_true", help="delete the node's children first")
    p = add("stat", cmd_stat, "print a node's stat (versions, zxids, owner, sizes)")
    p.add_argument("path")
    return parser


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    url = args.url or default_url()
    from impl.metadata import connect

    try:
        store = connect(url, session_timeout_s=args.session_timeout)
    except MetadataError as e:
        print(f"{prog}: {e.code}: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(f"{prog}: the backend for {url} is not available: {e}", file=sys.stderr)
        return 1
    try:
        args.func(store, args)
    except MetadataError as e:
        print(f"{prog}: {e.code}: {e}", file=sys.stderr)
        return 1
    finally:
        store.close()
    return 0
