"""The live cluster view, served by every broker's web service (in the spirit of BookKeeper Visual
Manager): plain server-rendered HTML, and a few lines of JavaScript that fetch the page again every
two seconds and swap its <main>, so a page follows the cluster without a reload.

- `/view`: brokers, bookies (read-write or read-only, free space, frame limit), the metadata store, and the tree
  tenants -> namespaces -> topics.
- `/view/topic/{tenant}/{namespace}/{topic}`: the managed ledger: its ledgers (state, the ensemble of
  every fragment, entries, size), cursors (mark-delete position, backlog) and schema versions.
- `/view/ledger/{id}`: a ledger's metadata, and which bookies hold which of its entries.

Everything shown comes from the metadata store and the admin REST API (a topic's live stats from
its owner, through a 307 if need be), so any broker shows the whole cluster.
"""

from __future__ import annotations

import html
import time
from typing import Any
from urllib.parse import quote

from impl.bookie.client.placement import frame_limit
from impl.broker import namespaces
from impl.broker.ledger_list import LedgerList
from impl.broker.web.context import WebContext
from impl.metadata.ledger import LedgerMetadata, LedgerState
from impl.metadata.ledger_store import LedgerMetadataStore, NoSuchLedger
from impl.metadata.naming import NamespaceName, TopicName, check_named_entity
from impl.metadata.registry import BookieRegistry
from impl.metadata.store import NoNode
from impl.web import client
from impl.web.http import HttpError, Request, Response, Router

REFRESH_MS = 2000
MAX_ENTRY_ROWS = 64  # a ledger page lists entries one by one up to this many, then by fragment

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #ccc; padding: .25em .6em; }
th { background: #f3f3f3; text-align: left; } .rw { color: #176317; } .ro { color: #a15c00; font-weight: bold; }
.open { color: #1a4fa0; font-weight: bold; } .closed { color: #555; } .held { background: #d9ead3; }
nav a { margin-right: 1em; } code { background: #f6f6f6; padding: 0 .2em; } #updated { color: #777; }
"""

_SCRIPT = """
setInterval(async () => {
  try {
    const page = await fetch(location.href, {cache: "no-store"});
    if (!page.ok) return;
    const doc = new DOMParser().parseFromString(await page.text(), "text/html");
    document.querySelector("main").replaceWith(doc.querySelector("main"));
  } catch (e) { /* the broker is restarting: try again at the next tick */ }
}, REFRESH_MS);
""".replace("REFRESH_MS", str(REFRESH_MS))


def e(value: object) -> str:
    return html.escape(str(value))


def page(title: str, body: str) -> Response:
    now = time.strftime("%H:%M:%S")
    document = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)} - pulsar-ref</title>"
        f"<style>{_STYLE}</style></head><body>"
        "<nav><a href='/view'>cluster</a></nav>"
        f"<main><h1>{e(title)}</h1>{body}<p id='updated'>as of {now}, refreshed every {REFRESH_MS // 1000} s</p>"
        f"</main><script>{_SCRIPT}</script></body></html>"
    )
    return Response.text(document, "text/html; charset=utf-8")


def table(headers: list[str], rows: list[list[str]], table_id: str = "") -> str:
    """Cells are HTML already (escape what comes from outside with `e`)."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    ident = f" id='{table_id}'" if table_id else ""
    return f"<table{ident}><tr>{head}</tr>{body}</table>"


def topic_href(name: TopicName) -> str:
    return f"/view/topic/{quote(name.tenant)}/{quote(name.namespace_portion)}/{quote(name.local_name, safe='')}"


class View:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def install(self, r: Router) -> None:
        r.add("GET", "/", lambda req: Response.redirect("/view"))
        r.add("GET", "/view", self.cluster)
        r.add("GET", "/view/topic/{tenant}/{namespace}/{topic}", self.topic)
        r.add("GET", "/view/ledger/{ledger_id}", self.ledger)

    # ---- the cluster ----------------------------------------------------------------------------

    def cluster(self, req: Request) -> Response:
        return page(f"cluster {self.ctx.cluster}", self._brokers() + self._bookies() + self._metadata() + self._tree())

    def _brokers(self) -> str:
        leader = self.ctx.leader()
        rows = [
            [
                e(address) + (" (leader)" if address == leader else ""),
                e(load.service_url),
                f"<a href='{e(load.web_url)}/view'>{e(load.web_url)}</a>",
                e(load.bundles),
                e(load.topics),
            ]
            for address, load in sorted(self.ctx.live_brokers().items())
        ]
        return "<h2>Brokers</h2>" + table(["broker", "Pulsar URL", "web service", "bundles", "topics"], rows, "brokers")

    def _bookies(self) -> str:
        rows = []
        for info in BookieRegistry(self.ctx.store).all_bookies():
            free = "?"
            if info.http_url:
                try:
                    space = client.call("GET", info.http_url + "/api/v1/bookie/info", timeout_s=2)
                    free = f"{space['freeSpace'] / 2**30:.1f} of {space['totalSpace'] / 2**30:.1f} GiB"
                except (HttpError, KeyError, TypeError) as err:
                    free = f"unknown ({e(err)})"
            state = "<span class='ro'>read-only</span>" if info.readonly else "<span class='rw'>read-write</span>"
            rows.append(
                [e(info.bookie_id), state, free, e(info.rack or ""), _frame_limit(info.netty_max_frame_size_bytes)]
            )
        return "<h2>Bookies</h2>" + table(["bookie", "state", "free space", "rack", "frame limit"], rows, "bookies")

    def _metadata(self) -> str:
        store = self.ctx.store
        kind = type(store).__name__
        where = getattr(store, "hosts", None) or getattr(store, "directory", "")  # ZooKeeper servers, or a file
        row = [e(kind), e(where), e(f"0x{store.session_id:x}")]
        return "<h2>Metadata store</h2>" + table(["store", "servers", "this broker's session"], [row], "metadata")

    def _tree(self) -> str:
        store, local = self.ctx.configuration_store, self.ctx.store
        items = []
        for tenant in namespaces.list_tenants(store):
            namespace_items = []
            for ns in namespaces.list_namespaces(store, tenant):
                topics = [TopicName.parse(t) for t in namespaces.all_topics(store, ns, local)]
                links = "".join(f"<li><a href='{topic_href(t)}'>{e(t)}</a></li>" for t in topics)
                namespace_items.append(f"<li>{e(ns)}<ul>{links or '<li>(no topics)</li>'}</ul></li>")
            items.append(f"<li>{e(tenant)}<ul>{''.join(namespace_items)}</ul></li>")
        return f"<h2>Tenants, namespaces, topics</h2><ul id='tree'>{''.join(items)}</ul>"

    # ---- a topic --------------------------------------------------------------------------------

    def topic(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        ns = NamespaceName(check_named_entity("tenant", tenant), check_named_entity("namespace", namespace))
        name = TopicName.parse(f"persistent://{ns}/{topic}")
        try:
            data, _ = self.ctx.store.get(name.managed_ledger_path)
        except NoNode:
            raise HttpError(404, f"Topic {name} not found") from None
        listed = LedgerList.decode(data)
        path = f"/admin/v2/persistent/{name.tenant}/{name.namespace_portion}/{quote(name.local_name, safe='')}"
        try:  # live figures from the owner (the open ledger's entries, the cursors)
            internal: dict[str, Any] = client.call(
                "GET", self.ctx.web_url + path + "/internalStats", timeout_s=10, headers=self.ctx.internal_headers()
            )
        except HttpError as err:
            internal = {"ledgers": [], "cursors": {}, "state": f"unknown: {err.reason}"}
        live = {ledger["ledgerId"]: ledger for ledger in internal["ledgers"]}
        ledgers = LedgerMetadataStore(self.ctx.store)
        rows = []
        for info in listed.ledgers:
            try:
                metadata, _ = ledgers.read(info.ledger_id)
                state, ensembles = _state(metadata), _ensembles(metadata)
            except NoSuchLedger:
                state, ensembles = "deleted", ""
            if info.offloaded:  # read from tiered storage (the bookie copy goes after the deletion lag)
                state = "offloaded" + (f" ({state} on the bookies)" if state == "deleted" else f", {state}")
            figures = live.get(info.ledger_id, {"entries": info.entries, "size": info.size})
            link = f"<a href='/view/ledger/{info.ledger_id}'>{info.ledger_id}</a>"
            rows.append([link, state, ensembles, e(figures["entries"]), e(figures["size"])])
        cursors = [
            [e(cursor), e(c["markDeletePosition"]), e(c["numberOfEntriesSinceFirstNotAckedMessage"])]
            for cursor, c in sorted(internal["cursors"].items())
        ]
        summary = table(
            ["managed ledger", "state", "last confirmed", "entries", "size"],
            [
                [
                    f"<code>{e(name.managed_ledger_name)}</code>",
                    e(internal.get("state", "")),
                    e(internal.get("lastConfirmedEntry", "")),
                    e(internal.get("numberOfEntries", "")),
                    e(internal.get("totalSize", "")),
                ]
            ],
            "summary",
        )
        body = (
            summary
            + "<h2>Ledgers</h2>"
            + table(["ledger", "state", "ensembles (first entry: bookies)", "entries", "size"], rows, "ledgers")
            + "<h2>Cursors</h2>"
            + table(["cursor", "mark-delete", "backlog"], cursors, "cursors")
            + "<h2>Schema</h2>"
            + self._schemas(name)
        )
        return page(str(name), body)

    def _schemas(self, name: TopicName) -> str:
        """The topic's schema versions from the registry (a partition shows its topic's), newest last."""
        base = name.base
        path = f"/admin/v2/schemas/{base.tenant}/{base.namespace_portion}/{quote(base.local_name, safe='')}/schemas"
        try:
            found: dict[str, Any] = client.call(
                "GET", self.ctx.web_url + path, timeout_s=10, headers=self.ctx.internal_headers()
            )
        except HttpError as err:
            if err.status == 404:
                return "<p id='schema-none'>no schema: producers and consumers send bytes</p>"
            return f"<p id='schema-none'>unknown: {e(err.reason)}</p>"
        rows = [
            [
                e(s["version"]),
                e(s["type"]),
                e(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["timestamp"] / 1000))),
                f"<code>{e(_shortened(s['data']))}</code>",
            ]
            for s in found["getSchemaResponses"]
        ]
        return table(["version", "type", "registered", "definition"], rows, "schemas")

    # ---- a ledger -------------------------------------------------------------------------------

    def ledger(self, req: Request, ledger_id: str) -> Response:
        # ASCII digits only (isdigit alone takes "²"), and within BookKeeper's signed 64-bit ids.
        if not (ledger_id.isascii() and ledger_id.isdigit() and len(ledger_id) <= 19 and int(ledger_id) < 2**63):
            raise HttpError(400, f"a ledger id is a whole number below 2**63, not {ledger_id[:40]!r}")
        try:
            metadata, version = LedgerMetadataStore(self.ctx.store).read(int(ledger_id))
        except NoSuchLedger:
            raise HttpError(404, f"ledger {ledger_id} does not exist") from None
        facts = table(
            ["state", "E / Qw / Qa", "last entry", "length", "digest", "metadata version"],
            [
                [
                    _state(metadata),
                    f"{metadata.ensemble_size} / {metadata.write_quorum} / {metadata.ack_quorum}",
                    e(metadata.last_entry_id) if metadata.state is LedgerState.CLOSED else "(open)",
                    e(metadata.length),
                    e(metadata.digest_type.name),
                    e(version),
                ]
            ],
            "facts",
        )
        return page(f"ledger {ledger_id}", facts + "<h2>Which bookies hold which entries</h2>" + _placement(metadata))


def _shortened(definition: str, limit: int = 160) -> str:
    return definition if len(definition) <= limit else definition[: limit - 1] + "\u2026"


def _state(metadata: LedgerMetadata) -> str:
    css = "open" if metadata.state is LedgerState.OPEN else "closed"
    return f"<span class='{css}'>{e(metadata.state.value.lower())}</span>"


def _ensembles(metadata: LedgerMetadata) -> str:
    return "<br>".join(f"{f.first_entry_id}: {e(', '.join(f.ensemble))}" for f in metadata.fragments)


def _frame_limit(published: int | None) -> str:
    """A bookie's nettyMaxFrameSizeBytes as it published it, or the limit brokers assume when it did not."""
    if published is None:
        return f"not published ({frame_limit(None):,} bytes assumed)"
    return f"{published:,} bytes"


def _placement(metadata: LedgerMetadata) -> str:
    """Entry e of a fragment is written to its ensemble's bookies (e + i) mod E for i < Qw (striping)."""
    closed = metadata.state is LedgerState.CLOSED
    last = metadata.last_entry_id if closed else None
    parts = []
    for i, fragment in enumerate(metadata.fragments):
        end = metadata.fragments[i + 1].first_entry_id - 1 if i + 1 < len(metadata.fragments) else last
        bookies = list(fragment.ensemble)
        span = f"{fragment.first_entry_id}..{end if end is not None else '(open)'}"
        if end is not None and end < fragment.first_entry_id:
            parts.append(f"<p>fragment {span}: no entries</p>")
            continue
        upto = end if end is not None else fragment.first_entry_id + metadata.ensemble_size - 1
        shown = range(fragment.first_entry_id, min(upto, fragment.first_entry_id + MAX_ENTRY_ROWS - 1) + 1)
        rows = []
        for entry in shown:
            holders = {bookies[(entry + k) % metadata.ensemble_size] for k in range(metadata.write_quorum)}
            rows.append([e(entry)] + ["<span class='held'>held</span>" if b in holders else "" for b in bookies])
        note = (
            ""
            if end is not None and len(shown) == end - fragment.first_entry_id + 1
            else ("<p>(the pattern repeats every E entries)</p>")
        )
        parts.append(f"<h3>fragment {span}</h3>" + table(["entry", *map(e, bookies)], rows, f"fragment-{i}") + note)
    return "".join(parts)


def install(router: Router, ctx: WebContext) -> None:
    View(ctx).install(router)
