"""Tiered storage: offloaders (Pulsar's LedgerOffloader) and the offload of a topic's ledgers.

api.py         the interface: offload, read_offloaded, delete_offloaded
format.py      one offloaded ledger as one object (pure)
filesystem.py  a directory (the standalone's default)
s3.py          S3 or any S3-compatible endpoint, through boto3
registry.py    the broker's settings and the offloader a ledger's offload context names
topic.py       one topic's offload, the storage lifecycle core's shell (docs/storage-lifecycle.md)
"""
