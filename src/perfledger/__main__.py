"""``python -m perfledger`` runs the CLI."""

from perfledger.commands.cli import main

main()
