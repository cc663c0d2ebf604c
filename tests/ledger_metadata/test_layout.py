from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.metadata import layout
from impl.metadata.store import InvalidArgument, validate_path


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (1, "/ledgers/00/0000/L0001"),
        (12345, "/ledgers/00/0001/L2345"),
        (1234567890, "/ledgers/12/3456/L7890"),
        (2**31 - 2, "/ledgers/21/4748/L3646"),
        # from Integer.MAX_VALUE on, BookKeeper's long hierarchy: 19 digits split 3-4-4-4-4
        (2**31 - 1, "/ledgers/000/0000/0021/4748/L3647"),
        (2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_ledger_paths(ledger_id: int, path: str) -> None:
    assert layout.ledger_path(ledger_id) == path
    assert layout.ledger_id_from_path(path) == ledger_id


@given(st.integers(0, 2**63 - 1))
def test_ledger_path_parses_back(ledger_id: int) -> None:
    path = layout.ledger_path(ledger_id)
    validate_path(path)
    assert layout.ledger_id_from_path(path) == ledger_id


@pytest.mark.parametrize("bad", [-1, 2**63, "1", 1.0, True])
def test_bad_ledger_ids(bad: object) -> None:
    with pytest.raises(layout.InvalidName, match="ledger id"):
        layout.ledger_path(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad", ["/ledgers/00/0000/0001", "/ledgers/0/0000/L0001", "/ledgers/000/0000/0000/0000/L0001", "/x/00/0000/L0001"]
)
def test_bad_ledger_paths(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        layout.ledger_id_from_path(bad)


def test_bookkeeper_and_pulsar_paths() -> None:
    assert layout.idgen_prefix_path() == "/ledgers/idgen/ID-"
    assert layout.id_from_idgen_path("/ledgers/idgen/ID-0000000042") == 42
    assert layout.bookie_path("10.0.0.1:3181") == "/ledgers/available/10.0.0.1:3181"
    assert layout.bookie_path("10.0.0.1:3181", readonly=True) == "/ledgers/available/readonly/10.0.0.1:3181"
    assert layout.managed_ledger_path("public", "default", "my-topic") == (
        "/managed-ledgers/public/default/persistent/my-topic"
    )
    assert layout.cursor_path("public", "default", "my-topic", "sub") == (
        "/managed-ledgers/public/default/persistent/my-topic/sub"
    )
    assert layout.bundle_ownership_path("public", "default", 0, 0x40000000) == (
        "/namespace/public/default/0x00000000_0x40000000"
    )
    assert layout.bundle_name(0xC0000000, 2**32) == "0xc0000000_0xffffffff"
    assert layout.parse_bundle_name("0xc0000000_0xffffffff") == (0xC0000000, 2**32)
    assert layout.broker_path("127.0.0.1:8080") == "/loadbalance/brokers/127.0.0.1:8080"


@given(st.text(min_size=1, max_size=20))
def test_topic_names_are_one_component_and_parse_back(topic: str) -> None:
    path = layout.managed_ledger_path("t", "ns", topic)
    assert path.count("/") == 5
    assert layout.parse_managed_ledger_path(path) == ("t", "ns", topic)


@pytest.mark.parametrize(
    "call",
    [
        lambda: layout.bookie_path("a/b"),
        lambda: layout.bookie_path("readonly"),
        lambda: layout.bookie_path(""),
        lambda: layout.managed_ledger_path("", "ns", "t"),
        lambda: layout.bundle_name(5, 5),
        lambda: layout.bundle_name(0, 2**32 + 1),
        lambda: layout.parse_bundle_name("0x1_0x2"),
        lambda: layout.broker_path("nohostport"),
        lambda: layout.id_from_idgen_path("/ledgers/idgen/ID-x"),
    ],
)
def test_bad_names(call: object) -> None:
    with pytest.raises(layout.InvalidName):
        call()  # type: ignore[operator]


def test_ledger_levels_skip_reserved_names() -> None:
    assert layout.is_ledger_level("00") and layout.is_ledger_level("000")
    for name in ("available", "idgen", "LAYOUT", "underreplication", "0", "0000"):
        assert not layout.is_ledger_level(name)
