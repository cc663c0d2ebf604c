"""Ledger metadata, the metadata store contract and its ZooKeeper / embedded / in-memory backends."""
