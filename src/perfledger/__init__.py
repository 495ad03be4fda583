"""perfledger: an event-sourced, git-backed, content-hashed ledger of GPU performance work.

``perfledger.open(path)`` returns a :class:`perfledger.api.Ledger`.
"""

from perfledger._version import __version__

__all__ = ["Ledger", "__version__", "find_ledger_path", "init", "open"]


def __dir__() -> list[str]:
    return sorted(__all__)


def __getattr__(name: str) -> object:
    # Lazy: `import perfledger` stays cheap for the CLI; the library API loads on first use.
    if name in {"open", "init", "Ledger", "find_ledger_path"}:
        from perfledger import api  # noqa: PLC0415 (off `perfledger --version`'s start-up path)

        return getattr(api, name)
    raise AttributeError(name)
