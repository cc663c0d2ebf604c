"""spec/metadata.tla against the in-memory metadata store (impl/metadata/memory.py).

What is checked against the implementation is the store: sessions (ids, liveness, expiry
deleting ephemerals), `/counter` (version, data, conditional `set`), `/owner` (an ephemeral
node and its czxid), `/seq` (sequential children, cversion) and the store's zxid. The spec's
clients (readCache, role, epoch) and its abstract data storage (`storage`: log and fence) are
the harness's own model of a client and of fenced storage, driven by the store's answers: they
are not implementation code (the fenced storage of the real system is the bookie, checked by
ledger.tla's replay).

Mapping (spec action [lastAction params] -> implementation input):

  Connect [client, session]        MemoryServer.connect(): a new session
  ExpireSession [client, session]  MemoryStore.expire_session(): its ephemeral nodes go
  NoticeExpiry [client]            the client uses its store; it must get SessionExpired
  ReadCounter [client, version]    get("/counter")
  IncrementCounter [client, expectedVersion, badVersion, lost, applied]
                                   set("/counter", read data + 1, expected version); BadVersion;
                                   with LostAnswers the answer may be lost after the set (applied or
                                   BadVersion) or with the request (no set): the write is kept pending
  RetryIncrement [client, expectedVersion, verdict]
                                   the pending set again; on BadVersion get("/counter") and the
                                   model's Resolution decides: own write, another's, or unknown
  CreateSequential [client, name]  create("/seq/", sequential=True)
  CreateOwnerNode [client, epoch]  create("/owner", ephemeral=True); its czxid is the epoch
  FenceStorage, WriteData          the harness's storage model (no store call)

The harness's setup (creating /counter and /seq with a session of its own) takes the first
zxids and session id: the abstraction subtracts that offset, once, consistently. With LostAnswers,
/counter's data carries the writer's token (`<data>:<client>:<n>`, n the client's write number),
which the "token" resolution reads back; without it the data is the number alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from conformance.replay import Candidate, Names
from conformance.tla_values import Function, ModelValue, Record, Value
from impl.metadata.memory import MemoryServer, MemoryStore
from impl.metadata.store import ANY_VERSION, BadVersion, SessionExpired

SPEC = "metadata.tla"


class MetadataHarnessError(Exception):
    """The store answered something the spec step has no room for."""


@dataclass
class Client:
    store: MemoryStore | None = None
    session: int = 0  # the store's id of the client's latest session (0: none yet)
    read: tuple[int, int] = (0, 0)  # (version, data) of its last read of /counter
    role: str = "none"  # the harness's client model: none / elected / writer
    epoch: int = 0  # czxid of the /owner node it created
    issued: int = 0  # its writes of /counter (with LostAnswers: its token's number)
    pending: tuple[int, int, bool] | None = None  # a set whose answer was lost: (expected, data, applied)


@dataclass
class MetadataWorld:
    server: MemoryServer
    clients: dict[str, Client]
    zxid_base: int  # zxids and session ids the harness's setup used
    session_base: int
    conditional: bool
    fencing: bool
    expiries: int = 0
    updates: int = 0
    owner_seen: tuple[int, int] = (0, 0)  # (version, czxid) of /owner when it last existed
    log: list[tuple[str, int]] = field(default_factory=list)  # storage: accepted (client, epoch)
    fence: int = 0
    lost_answers: bool = False
    resolution: str = "token"
    misreported: bool = False  # a client was told a wrong outcome of a write whose answer was lost

    def store(self, name: str) -> MemoryStore:
        store = self.clients[name].store
        if store is None:
            raise MetadataHarnessError(f"client {name} has no session")
        return store

    def note_owner(self) -> None:
        node = self.server.nodes.get("/owner")
        if node is not None:
            self.owner_seen = (node.version, node.czxid)


class MetadataMapping:
    spec = SPEC
    symmetric: frozenset[ModelValue] = frozenset()

    def __init__(self, constants: Mapping[str, Value], *, cores: type[MemoryServer] | None = None) -> None:
        self.server_type = cores or MemoryServer  # tests swap in a broken store
        clients = constants["Clients"]
        assert isinstance(clients, frozenset)
        self.clients = sorted((c for c in clients if isinstance(c, ModelValue)), key=str)
        self.conditional = bool(constants["ConditionalWrites"])
        self.fencing = bool(constants["Fencing"])
        # Issue 24 item 3 (definitions a model may override): lost answers of /counter's sets.
        self.lost_answers = constants.get("LostAnswers") is True
        self.resolution = str(constants.get("Resolution", "token"))
        # metadata.tla's violating models are configurations (blind writes, no fencing, a resolution of
        # lost answers), not bugs: the store must follow their counterexamples to the end. A `Mutation`
        # (issue 47: the store breaking a rule of its own) is a bug it does not have: it must refuse it.
        self.counterexamples_are_followed = constants.get("Mutation", "none") == "none"

    def initial(self, state: Mapping[str, Value]) -> tuple[MetadataWorld, Names]:
        server = self.server_type()
        setup = server.connect()
        setup.create("/counter", b"0")
        setup.create("/seq")
        setup.close()
        world = MetadataWorld(
            server,
            {c.name: Client() for c in self.clients},
            zxid_base=server.zxid,
            session_base=setup.session_id,
            conditional=self.conditional,
            fencing=self.fencing,
            lost_answers=self.lost_answers,
            resolution=self.resolution,
        )
        return world, {}

    def candidates(self, world: MetadataWorld, names: Names, action: str) -> list[Candidate]:
        run = getattr(self, f"_{action}", None)
        if run is None:
            raise KeyError(f"metadata.tla action {action} has no mapping")

        def bind(name: str) -> Callable[[MetadataWorld], None]:
            return lambda w: run(w, name)

        if action == "IncrementCounter" and self.lost_answers:
            outcomes: list[tuple[str, dict[str, Value]]] = [
                ("answered", {"lost": False}),
                ("lostAfter", {"lost": True}),
                ("lostBefore", {"lost": True, "applied": False}),
            ]
            return [
                Candidate(f"{action} {c} ({outcome})", {"client": c, **params}, _bind_outcome(run, c.name, outcome))
                for c in self.clients
                for outcome, params in outcomes
            ]
        return [Candidate(f"{action} {c}", {"client": c}, bind(c.name)) for c in self.clients]

    # ---- actions ------------------------------------------------------------------------------
    @staticmethod
    def _Connect(world: MetadataWorld, name: str) -> None:
        store = world.server.connect()
        world.clients[name].store = store
        world.clients[name].session = store.session_id

    @staticmethod
    def _ExpireSession(world: MetadataWorld, name: str) -> None:
        world.note_owner()
        world.store(name).expire_session()
        world.expiries += 1

    @staticmethod
    def _NoticeExpiry(world: MetadataWorld, name: str) -> None:
        try:
            world.store(name).exists("/counter")
        except SessionExpired:
            world.clients[name].role = "none"
            return
        raise MetadataHarnessError(f"client {name}'s session still works: nothing to notice")

    @staticmethod
    def _ReadCounter(world: MetadataWorld, name: str) -> None:
        data, stat = world.store(name).get("/counter")
        world.clients[name].read = (stat.version, counter_value(data))

    @staticmethod
    def _IncrementCounter(world: MetadataWorld, name: str, outcome: str = "answered") -> None:
        """setData; `outcome` (with LostAnswers): "lostAfter" = the answer is lost after the store
        answered, "lostBefore" = lost with the request (nothing reaches the store)."""
        client = world.clients[name]
        version, data = client.read
        expected = version if world.conditional else ANY_VERSION
        if world.lost_answers:
            if client.pending is not None:
                raise MetadataHarnessError(f"client {name} has a write pending")
            client.issued += 1
        payload = counter_data(data + 1, name, client.issued, world.lost_answers)
        applied = False
        if outcome != "lostBefore":
            try:
                world.store(name).set("/counter", payload, expected)
                applied = True
            except BadVersion:
                pass
        if applied:
            world.updates += 1
        if outcome != "answered":
            client.pending = (expected, data + 1, applied)

    @staticmethod
    def _RetryIncrement(world: MetadataWorld, name: str) -> None:
        """The pending set again, the same version and data; on BadVersion read /counter back and resolve."""
        client = world.clients[name]
        if client.pending is None:
            raise MetadataHarnessError(f"client {name} has no write pending")
        expected, data, applied = client.pending
        store = world.store(name)
        client.pending = None
        try:
            store.set("/counter", counter_data(data, name, client.issued, world.lost_answers), expected)
        except BadVersion:
            stored, stat = store.get("/counter")
            client.read = (stat.version, counter_value(stored))
            own_next = stat.version == expected + 1
            if world.resolution == "token":
                verdict = (
                    "unknown" if not own_next else "own" if counter_writer(stored) == (name, client.issued) else "other"
                )
            elif world.resolution == "content":
                verdict = "own" if own_next and counter_value(stored) == data else "other"
            else:  # "conflict"
                verdict = "other"
            world.misreported |= (verdict == "own" and not applied) or (verdict == "other" and applied)
            return
        world.updates += 1

    @staticmethod
    def _CreateSequential(world: MetadataWorld, name: str) -> None:
        world.store(name).create("/seq/", sequential=True)

    @staticmethod
    def _CreateOwnerNode(world: MetadataWorld, name: str) -> None:
        store = world.store(name)
        store.create("/owner", ephemeral=True)
        stat = store.exists("/owner")
        assert stat is not None
        client = world.clients[name]
        client.epoch = stat.czxid
        client.role = "elected" if world.fencing else "writer"
        world.note_owner()

    @staticmethod
    def _FenceStorage(world: MetadataWorld, name: str) -> None:
        client = world.clients[name]
        world.fence = max(world.fence, client.epoch)
        client.role = "writer"

    @staticmethod
    def _WriteData(world: MetadataWorld, name: str) -> None:
        client = world.clients[name]
        if world.fencing and client.epoch < world.fence:
            client.role = "none"
        else:
            world.log.append((name, client.epoch))

    # ---- the abstraction ----------------------------------------------------------------------
    def abstract(self, world: MetadataWorld, names: Names) -> dict[str, Value]:
        server = world.server

        def session(impl: int) -> int:
            return impl - world.session_base if impl else 0

        def zxid(impl: int) -> int:
            return impl - world.zxid_base if impl else 0

        def per_client(value: Callable[[Client], Value]) -> Function:
            return Function.of({c: value(world.clients[c.name]) for c in self.clients})

        counter = server.nodes["/counter"]
        seq = server.nodes["/seq"]
        owner = server.nodes.get("/owner")
        if owner is not None:
            owner_value = Record.of(
                {
                    "exists": True,
                    "version": owner.version,
                    "czxid": zxid(owner.czxid),
                    "ephemeralOwner": session(owner.ephemeral_owner),
                }
            )
        else:  # the spec keeps the deleted node's version and czxid
            version, czxid = world.owner_seen
            owner_value = Record.of({"exists": False, "version": version, "czxid": zxid(czxid), "ephemeralOwner": 0})
        alive = {
            c.name: world.clients[c.name].session in server.sessions
            and server.sessions[world.clients[c.name].session].alive
            for c in self.clients
        }
        return {
            "sessionId": per_client(lambda c: session(c.session)),
            "sessionAlive": Function.of({c: alive[c.name] for c in self.clients}),
            "nextSession": server._next_session_id - world.session_base,
            "expiries": world.expiries,
            "counter": Record.of(
                {"version": counter.version, "data": counter_value(counter.data), "writer": writer_value(counter.data)}
            ),
            "updates": world.updates,
            "readCache": per_client(lambda c: Record.of({"version": c.read[0], "data": c.read[1]})),
            "owner": owner_value,
            "zxid": zxid(server.zxid),
            "seqChildren": frozenset(int(child) for child in seq.children),
            "cversion": seq.child_creations,
            "role": per_client(lambda c: c.role),
            "epoch": per_client(lambda c: zxid(c.epoch)),
            "storage": Record.of(
                {
                    "log": tuple(Record.of({"client": ModelValue(n), "epoch": zxid(e)}) for n, e in world.log),
                    "fence": zxid(world.fence),
                }
            ),
            "pending": per_client(pending_value),
            "issued": per_client(lambda c: c.issued),
            "misreported": world.misreported,
        }


def counter_data(value: int, client: str, n: int, token: bool) -> bytes:
    """/counter's data: the number, and with lost answers the writer's token."""
    return f"{value}:{client}:{n}".encode() if token else str(value).encode()


def counter_value(data: bytes) -> int:
    return int(data.split(b":")[0])


def counter_writer(data: bytes) -> tuple[str, int] | None:
    parts = data.decode().split(":")
    return (parts[1], int(parts[2])) if len(parts) == 3 else None


def writer_value(data: bytes) -> Value:
    writer = counter_writer(data)
    return "none" if writer is None else (ModelValue(writer[0]), writer[1])


def pending_value(client: Client) -> Value:
    if client.pending is None:
        return Record.of({"active": False, "version": 0, "data": 0, "applied": False})
    expected, data, applied = client.pending
    return Record.of({"active": True, "version": expected, "data": data, "applied": applied})


def _bind_outcome(run: Callable[..., None], name: str, outcome: str) -> Callable[[MetadataWorld], None]:
    return lambda world: run(world, name, outcome)
