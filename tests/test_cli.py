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
