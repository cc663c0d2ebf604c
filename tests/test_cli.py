"""The `pulsar-ref` entry point: help, unknown commands, commands not built yet."""

import subprocess
import sys

from pulsar_ref import cli


def test_help_lists_every_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert f"  {name}" in out


def test_unknown_command_is_an_error(capsys):
    assert cli.main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0.1.0"


def exit_code(argv: list[str]) -> int:
    """What `pulsar-ref ARGV` exits with (argparse's errors raise SystemExit)."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def test_size_settings_that_cannot_work_are_refused(capsys, tmp_path):
    """--max-message-size (broker, standalone, cluster up) and --netty-max-frame-size-bytes (bookie): not
    positive, or entries bigger than a bookie can take (12 MiB - 64 KiB, what its gRPC stream carries)."""
    meta, data = f"embedded://{tmp_path / 'meta'}", str(tmp_path / "data")
    for argv in (
        ["broker", "--metadata", meta, "--max-message-size", "0"],
        ["broker", "--metadata", meta, "--max-message-size", str(13 * 1024 * 1024)],
        ["standalone", "--data", data, "--max-message-size", "-1"],
        ["standalone", "--data", data, "--max-message-size", str(12 * 1024 * 1024)],
        ["cluster", "up", "--dir", data, "--max-message-size", "0"],
        ["bookie", "--metadata", meta, "--data", data, "--netty-max-frame-size-bytes", "0"],
        ["bookie", "--metadata", meta, "--data", data, "--netty-max-frame-size-bytes", str(13 * 1024 * 1024)],
    ):
        assert exit_code(argv) == 2, argv
        err = capsys.readouterr().err
        assert "max message size must be 1..12507136 bytes" in err or "must be an integer in 1..12517376" in err
    assert not (tmp_path / "data").exists() and not (tmp_path / "meta").exists()  # refused before starting
