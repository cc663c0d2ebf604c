"""The bookie (storage node) and the BookKeeper client."""
