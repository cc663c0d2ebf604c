"""metadata.tla's TLC behaviours replayed against the in-memory store (impl/metadata/memory.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from conformance.metadata_spec import MetadataMapping
from conformance.replay import GraphReplay, read_constants, replay_graph
from conformance.statespace import StateGraph, dump_state_graph
from conformance.tlc import SPEC_DIR, load_manifest
from impl.metadata.memory import MemoryServer
from impl.metadata.store import ANY_VERSION, Op, OpResult, SetData
from tests.conformance.shared import Conformance

pytestmark = pytest.mark.tlc

MODELS = {m.name: m for m in load_manifest()}

# metadata-ci (60,457 states) takes a minute or two: `pulsar-ref conform --spec metadata` runs it.
# This one has every action, a stale read racing an update, expiry of the owner, fencing.
SMALL_CFG = """CONSTANTS
    Clients = {c1, c2}
    MaxUpdates = 1
    MaxSequential = 1
    MaxExpiries = 1
    MaxDataWrites = 2
    ConditionalWrites = TRUE
    Fencing = TRUE
SPECIFICATION Spec
VIEW view
"""


# Two read-modify-writes racing, nothing else: a stale write must get BadVersion.
COUNTER_CFG = (
    SMALL_CFG.replace("MaxUpdates = 1", "MaxUpdates = 2")
    .replace("MaxSequential = 1", "MaxSequential = 0")
    .replace("MaxExpiries = 1", "MaxExpiries = 0")
    .replace("MaxDataWrites = 2", "MaxDataWrites = 0")
)


def _graph(tmp_path_factory: pytest.TempPathFactory, name: str, text: str) -> tuple[StateGraph, str]:
    config = tmp_path_factory.mktemp("cfg") / f"metadata_test_{name}.cfg"
    config.write_text(text)
    return dump_state_graph(SPEC_DIR / "metadata.tla", config), text


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[StateGraph, str]:
    return _graph(tmp_path_factory, "small", SMALL_CFG)


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> tuple[StateGraph, str]:
    return _graph(tmp_path_factory, "counter", COUNTER_CFG)


def replay(small: tuple[StateGraph, str], server: type[MemoryServer] | None = None) -> GraphReplay:
    graph, config = small
    return replay_graph(MetadataMapping(read_constants(config), cores=server), "small", graph, symmetry=False)


def test_every_edge_of_the_state_graph_is_replayed(
    small: tuple[StateGraph, str], counter: tuple[StateGraph, str]
) -> None:
    for graph in (small, counter):
        report = replay(graph)
        assert report.mismatch is None, str(report.mismatch)
        assert report.edges_covered == report.edges == len(graph[0].edges) > 0
        assert report.states_covered == report.states == len(graph[0].labels)
    actions = {e.action for e in small[0].edges}
    assert actions == {
        "Connect",
        "ExpireSession",
        "NoticeExpiry",
        "ReadCounter",
        "IncrementCounter",
        "CreateSequential",
        "CreateOwnerNode",
        "FenceStorage",
        "WriteData",
    }


@pytest.mark.parametrize("name", ["metadata-nofencing-ci", "metadata-blindwrites-ci"])
def test_the_store_follows_the_predicted_anomaly(conformance: Conformance, name: str) -> None:
    # Not bugs of the store: configurations (blind writes, no fencing) whose anomaly it must reproduce.
    result = conformance.replay(name)  # replay_model(MODELS[name]), once per session
    assert result.trace is not None and result.follow
    assert result.trace.mismatch is None, str(result.trace.mismatch)
    assert result.ok and result.trace.steps == result.trace_states - 1 > 0


class ServerKeepingEphemerals(MemoryServer):
    """Broken: an expired session's ephemeral nodes survive (a stale owner node blocks takeover)."""

    def end_session(self, session_id: int, expired: bool) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.alive = False


class ServerIgnoringVersions(MemoryServer):
    """Broken: setData ignores the expected version (every write is blind)."""

    def transact(self, session_id: int, ops: Sequence[Op]) -> list[OpResult]:
        return super().transact(
            session_id, [replace(op, version=ANY_VERSION) if isinstance(op, SetData) else op for op in ops]
        )


@pytest.mark.parametrize(
    ("model", "server", "symptom"),
    [("small", ServerKeepingEphemerals, "owner"), ("counter", ServerIgnoringVersions, "counter")],
    ids=["expiry-keeps-ephemerals", "set-ignores-version"],
)
def test_a_broken_store_is_caught(
    request: pytest.FixtureRequest, model: str, server: type[MemoryServer], symptom: str
) -> None:
    report = replay(request.getfixturevalue(model), server)
    assert report.mismatch is not None, f"the replay did not catch {server.__name__}"
    assert symptom in report.mismatch.differing, str(report.mismatch)
