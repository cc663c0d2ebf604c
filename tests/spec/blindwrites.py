"""A models.toml entry over metadata.tla's blind-writes model, for tests of `spec check` itself."""

from __future__ import annotations

import shutil
from pathlib import Path

from conformance.tlc import SPEC_DIR

CONFIG = "metadata_blindwrites_ci.cfg"


def copy_blindwrites(directory: Path) -> tuple[Path, Path]:
    """metadata.tla and its blind-writes config copied into `directory` (a test's own manifest's home)."""
    for name in ("metadata.tla", CONFIG):
        shutil.copy(SPEC_DIR / name, directory / name)
    return directory / "metadata.tla", directory / CONFIG


def blindwrites_entry(name: str, *, profile: str = "ci", violates: str = "NoLostUpdate") -> str:
    """A model of that config expected to violate `violates` (the blind writes lose an update)."""
    return (
        f'[[model]]\nname = "{name}"\nspec = "metadata.tla"\nconfig = "{CONFIG}"\n'
        f'profile = "{profile}"\nexpect = "violation"\nviolates = "{violates}"\ndescription = "test"\n'
    )
