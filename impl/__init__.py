"""Reference implementation: metadata <- bookie <- broker (see docs/architecture.md)."""
