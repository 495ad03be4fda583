"""``python -m perfledger`` runs the CLI."""

from perfledger.commands.cli.app import main

main()
