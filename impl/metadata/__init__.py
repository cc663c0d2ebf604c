"""Ledger metadata, the metadata store contract and its ZooKeeper / embedded / in-memory backends."""

from impl.metadata.url import connect

__all__ = ["connect"]
