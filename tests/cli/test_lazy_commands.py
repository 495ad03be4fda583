"""The CLI's lazily loaded commands (click's lazy-subcommand pattern, ``app.LazyGroup``): every
name in ``LAZY_COMMANDS`` loads the command of that name, ``perfledger --help`` lists them from
``COMMAND_HELP`` without importing their modules, and that table says what the commands say."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from perfledger.commands.cli.app import LAZY_COMMANDS, cli
from perfledger.commands.cli.command_help import COMMAND_HELP


@pytest.mark.parametrize("name", sorted(LAZY_COMMANDS))
def test_each_lazy_name_loads_the_command_of_that_name(name: str) -> None:
    command = cli.get_command(click.Context(cli, info_name="perfledger"), name)
    assert isinstance(command, click.Command) and command.name == name


def test_the_help_table_says_what_each_command_says() -> None:
    assert set(COMMAND_HELP) == set(LAZY_COMMANDS)
    ctx = click.Context(cli, info_name="perfledger")
    for name, text in COMMAND_HELP.items():
        command = cli.get_command(ctx, name)
        assert command is not None and not command.hidden, name
        for limit in (30, 45, 80, 300):
            said = click.Command(name, help=text).get_short_help_str(limit)
            assert said == command.get_short_help_str(limit), (name, limit)


def test_help_lists_every_command_without_importing_a_command_module() -> None:
    probe = (
        "import sys\n"
        "from perfledger.commands.cli.app import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "modules = {m.split(':')[0] for m in __import__('perfledger.commands.cli.app', "
        "fromlist=['x']).LAZY_COMMANDS.values()}\n"
        "print(sorted(m for m in modules if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("[]"), done.stderr
    assert all(f"  {name} " in done.stdout or f"  {name}\n" in done.stdout
               for name in LAZY_COMMANDS)  # fmt: skip
