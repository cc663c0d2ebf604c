"""Reference implementation: metadata <- bookie <- broker (see ../shared/ARCHITECTURE.md)."""
