"""Topic and namespace names: round trips, short forms, partitions, and typed errors for bad names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.metadata import layout
from impl.metadata.naming import (
    InvalidNamespaceName,
    InvalidTopicName,
    NamespaceName,
    NonPersistentNotSupported,
    TopicName,
)

ENTITY_CHARS = "-=:._abcXYZ019"
entities = st.text(alphabet=ENTITY_CHARS, min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
# Local names: any printable Unicode but '/', without a non-canonical "-partition-<digits>" ending.
local_names = (
    st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/"), min_size=1, max_size=20)
    .filter(lambda s: s not in (".", ".."))
    .filter(lambda s: "-partition-" not in s or not s.rsplit("-partition-", 1)[1].isascii())
)
topics = st.builds(TopicName, entities, entities, local_names)


@given(topics)
def test_full_name_round_trips(topic: TopicName) -> None:
    text = str(topic)
    assert text == f"persistent://{topic.tenant}/{topic.namespace_portion}/{topic.local_name}"
    assert TopicName.parse(text) == topic
    assert TopicName.parse(f"{topic.tenant}/{topic.namespace_portion}/{topic.local_name}") == topic
    assert topic.namespace == f"{topic.tenant}/{topic.namespace_portion}"
    assert NamespaceName.parse(topic.namespace) == topic.namespace_name
    # The managed ledger path parses back to the same parts (the local name is URL-encoded into one component).
    assert layout.parse_managed_ledger_path(topic.managed_ledger_path) == (
        topic.tenant,
        topic.namespace_portion,
        topic.local_name,
    )
    assert topic.managed_ledger_path == f"/managed-ledgers/{topic.managed_ledger_name}"


@given(local_names)
def test_short_name_is_in_public_default(local: str) -> None:
    assert TopicName.parse(local) == TopicName("public", "default", local)
    assert str(TopicName.parse(local)).startswith("persistent://public/default/")


@given(topics, st.integers(min_value=0, max_value=10**6))
def test_partitions(topic: TopicName, index: int) -> None:
    base = topic.base
    partition = base.partition_name(index)
    assert partition.partition == index and partition.is_partition
    assert partition.base == base
    assert str(partition) == f"{base}-partition-{index}"
    assert TopicName.parse(str(partition)) == partition
    assert base.partition is None or base.base != base


def test_partition_examples() -> None:
    t = TopicName.parse("persistent://acme/orders/events-partition-7")
    assert (t.partition, str(t.base)) == (7, "persistent://acme/orders/events")
    assert TopicName.parse("events-partition-x").partition is None  # not a partition: an ordinary name
    assert TopicName.parse("events-partition-\u0663").partition is None  # only ASCII digits number partitions
    assert TopicName.parse("events").partition is None
    with pytest.raises(InvalidTopicName, match="no partitions of its own"):
        t.partition_name(1)
    with pytest.raises(InvalidTopicName, match="integer >= 0"):
        t.base.partition_name(-1)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("a/b", "short name"),
        ("a/b/c/d", "short name"),
        ("persistent://acme/orders/a/b", "contains '/'"),
        ("persistent://acme/orders/", "local name is empty"),
        ("persistent://acme/orders", "tenant, namespace and topic"),
        ("persistent://ac me/orders/t", "tenant name 'ac me' is invalid"),
        ("persistent://acme/ord!ers/t", "namespace name 'ord!ers' is invalid"),
        ("persistent:///orders/t", "tenant name '' is invalid"),
        ("persistent://acme/../t", "namespace name '..' is invalid"),
        ("persistent://acme/orders/..", "cannot be '..'"),
        ("persistent://acme/orders/a\x00b", "control character"),
        ("persistent://acme/orders/t-partition-01", "without leading zeros"),
        ("kafka://acme/orders/t", "unknown domain 'kafka'"),
        ("persistent://acme/orders/\ud800", "lone surrogate"),
    ],
)
def test_bad_names_say_what_is_wrong_and_what_is_valid(name: str, why: str) -> None:
    with pytest.raises(InvalidTopicName) as raised:
        TopicName.parse(name)
    assert why in str(raised.value)
    assert "persistent://public/default/my-topic" in str(raised.value)
    assert raised.value.code == "InvalidTopicName"


def test_non_persistent_names_parse_and_keep_their_domain() -> None:
    name = TopicName.parse("non-persistent://public/default/t")
    assert (name.domain, name.persistent, str(name)) == ("non-persistent", False, "non-persistent://public/default/t")
    assert name != TopicName.parse("persistent://public/default/t")
    part = name.partition_name(2)
    assert str(part) == "non-persistent://public/default/t-partition-2" and part.base == name
    assert TopicName.parse(str(part)) == part
    with pytest.raises(NonPersistentNotSupported, match="no managed ledger") as raised:
        _ = name.managed_ledger_path
    assert isinstance(raised.value, InvalidTopicName)
    with pytest.raises(InvalidTopicName, match="unknown domain"):
        TopicName.parse("transient://public/default/t")


def test_not_a_string() -> None:
    with pytest.raises(InvalidTopicName, match="not int"):
        TopicName.parse(42)  # type: ignore[arg-type]


@given(st.text(max_size=40))
def test_any_text_parses_or_raises_the_typed_error(text: str) -> None:
    try:
        topic = TopicName.parse(text)
    except InvalidTopicName:
        return
    assert TopicName.parse(str(topic)) == topic
    assert "/" not in topic.local_name


@given(topics, local_names)
def test_a_slash_in_the_local_name_is_an_error(topic: TopicName, more: str) -> None:
    with pytest.raises(InvalidTopicName, match="contains '/'"):
        TopicName.parse(f"{topic}/{more}")


@pytest.mark.parametrize("name", ["public", "a/b/c", "/x", "a/", "a b/c", "./x"])
def test_bad_namespace_names(name: str) -> None:
    with pytest.raises(InvalidNamespaceName):
        NamespaceName.parse(name)


def test_namespace_name_round_trip() -> None:
    ns = NamespaceName.parse("acme:eu/orders.v2=x")
    assert str(ns) == "acme:eu/orders.v2=x" and (ns.tenant, ns.namespace) == ("acme:eu", "orders.v2=x")
    assert TopicName.of(ns, "t") == TopicName.parse("persistent://acme:eu/orders.v2=x/t")
