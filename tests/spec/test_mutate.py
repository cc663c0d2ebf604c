"""The mutation campaign (issue 47, item 5): spec/mutations.toml and `pulsar-ref spec mutate`.

The catalogue tests read files only. The TLC tests run the catalogue's fast subset (profile = "ci",
about 25 s of TLC on 1 worker) and a few one-off catalogues on tiny models; the whole campaign is
`pulsar-ref spec mutate --profile deep` (spec/mutations.md has its table).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conformance.mutate import (
    KILLED,
    SURVIVED,
    TABLE_BEGIN,
    TABLE_END,
    CatalogueError,
    load_catalogue,
    run_mutant,
)
from conformance.tlc import SPEC_DIR
from pulsar_ref.commands import spec as spec_command

CATALOGUE = SPEC_DIR / "mutations.toml"


def test_the_catalogue_parses_and_covers_every_spec() -> None:
    mutants = load_catalogue()
    assert len(mutants) >= 40
    specs = {m.spec for m in mutants}
    assert {"ledger.tla", "fencing.tla", "metadata.tla", "cursor.tla", "replication.tla", "storage.tla"} <= specs
    # every spec has mutants in the fast subset, and every survivor says why it is harmless
    assert specs == {m.spec for m in mutants if m.profile == "ci"}
    assert all(m.survives for m in mutants if m.expect == SURVIVED)
    # each mutant changes its spec (the old text is there once, the new text differs)
    for m in mutants:
        text = (SPEC_DIR / m.spec).read_text()
        assert text.count(m.old) == 1 and m.mutated_text(text) != text, m.id


def test_every_survivor_is_explained_on_its_specs_page() -> None:
    for m in load_catalogue():
        if m.expect == SURVIVED:
            page = (SPEC_DIR / m.spec.replace(".tla", ".md")).read_text()
            assert f"`{m.id}`" in page, f"{m.id} is not explained in spec/{m.spec.replace('.tla', '.md')}"


def test_the_table_page_has_its_markers_and_lists_every_mutant() -> None:
    page = (SPEC_DIR / "mutations.md").read_text()
    assert TABLE_BEGIN in page and TABLE_END in page
    table = page[page.index(TABLE_BEGIN) : page.index(TABLE_END)]
    assert {m.id for m in load_catalogue()} == set(re.findall(r"^\| `([\w-]+)` \|", table, flags=re.M))


def _write(path: Path, entry: str) -> Path:
    path.write_text("[[mutant]]\n" + entry)
    return path


ENTRY = (
    'id = "x"\nspec = "metadata.tla"\nconfig = "metadata_ci.cfg"\n'
    "old = 'ok == expected = AnyVersion \\/ expected = counter.version'\nnew = 'ok == TRUE'\nreason = \"blind\"\n"
)


def _spec_dir(tmp_path: Path) -> Path:
    for f in ("metadata.tla", "metadata_ci.cfg"):
        shutil.copy(SPEC_DIR / f, tmp_path / f)
    return tmp_path


def test_an_old_text_not_in_the_spec_is_a_clear_error(tmp_path: Path) -> None:
    cat = _write(_spec_dir(tmp_path) / "m.toml", ENTRY.replace("counter.version'", "counter.versions'"))
    with pytest.raises(CatalogueError, match=r"mutant #1 \(x\): the old text .* is not in metadata.tla"):
        load_catalogue(cat)
    # an old text found twice is ambiguous: also refused
    cat = _write(
        tmp_path / "m.toml",
        ENTRY.replace("ok == expected = AnyVersion \\/ expected = counter.version'", "counter.version + 1'"),
    )
    with pytest.raises(CatalogueError, match="occurs 2 times in metadata.tla"):
        load_catalogue(cat)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('reason = "blind"\n', ""), "missing reason"),
        (("reason", "raeson"), "unknown field raeson"),
        (
            ("new = 'ok == TRUE'", "new = 'ok == expected = AnyVersion \\/ expected = counter.version'"),
            "not a mutation",
        ),
        (('config = "metadata_ci.cfg"', 'config = "nope.cfg"'), "no model config nope.cfg"),
        (("reason", 'expect = "survived"\nreason'), "needs survives"),
        (("reason", 'profile = "fast"\nreason'), "profile must be one of ci, deep"),
    ],
)
def test_a_malformed_entry_says_what_is_wrong(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    cat = _write(_spec_dir(tmp_path) / "m.toml", ENTRY.replace(*change))
    with pytest.raises(CatalogueError, match=message):
        load_catalogue(cat)


def test_the_command_reports_a_bad_catalogue_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cat = _write(_spec_dir(tmp_path) / "m.toml", ENTRY.replace("counter.version'", "counter.versions'"))
    assert spec_command.main(["mutate", "--catalogue", str(cat)], "spec") == 2
    assert "is not in metadata.tla" in capsys.readouterr().err
    assert spec_command.main(["mutate", "--catalogue", str(CATALOGUE), "--id", "nope"], "spec") == 2
    assert "no mutant nope" in capsys.readouterr().err


@pytest.mark.tlc
def test_a_known_bad_mutant_is_killed_and_a_harmless_one_survives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_dir = _spec_dir(tmp_path)
    blind = load_catalogue(_write(spec_dir / "m.toml", ENTRY))[0]
    result = run_mutant(blind, spec_dir)
    assert (result.status, result.killed_by) == (KILLED, "NoLostUpdate")  # a blind setData loses an update
    assert (spec_dir / "metadata.tla").read_text() == (SPEC_DIR / "metadata.tla").read_text(), "spec/ untouched"
    # a change of a comment only: the model passes, the mutant survives; it was expected killed: exit 1
    comment = ENTRY.replace(
        "old = 'ok == expected = AnyVersion \\/ expected = counter.version'\nnew = 'ok == TRUE'",
        "old = 'setData(/counter, read data + 1,'\nnew = 'setData(/counter, read data plus 1,'",
    )
    cat = _write(spec_dir / "c.toml", comment)
    assert load_catalogue(cat)[0].old == "setData(/counter, read data + 1,"
    assert spec_command.main(["mutate", "--catalogue", str(cat), "--id", "x"], "spec") == 1
    out, err = capsys.readouterr()
    assert re.search(r"^x\s+metadata.tla\s+metadata_ci.cfg\s+survived  << UNEXPECTED", out, flags=re.M)
    assert "x: expected killed, got survived" in err


@pytest.mark.tlc
def test_the_fast_subset_gives_the_catalogues_results(capsys: pytest.CaptureFixture[str]) -> None:
    assert spec_command.main(["mutate"], "spec") == 0  # default: --profile ci
    out = capsys.readouterr().out
    fast = [m for m in load_catalogue() if m.profile == "ci"]
    assert f"{len(fast)} mutants:" in out
    assert re.search(r"ledger-bookie-ignores-fence\s+ledger.tla\s+ledger_ci_basic.cfg\s+killed\s+NoDivergence", out)
    assert re.search(r"repl-highest-seq-overwritten\s+replication.tla\s+\S+\s+survived\s+equivalent", out)
    assert "[1/" in out and "UNEXPECTED" not in out
