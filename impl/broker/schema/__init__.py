"""The schema registry (docs/schema.md): schemas stored as BookKeeper entries, located through the
metadata store, checked for compatibility with Pulsar's strategies.

  model.py          schema data, types, hashes, versions and the validation of definitions (pure)
  compatibility.py  the strategies: may this schema join these versions? (pure)
  storage.py        the shell: ledgers and the locator node, every change a conditional write
  registry.py       the shell the broker calls: get, get-or-create, check, delete
"""
