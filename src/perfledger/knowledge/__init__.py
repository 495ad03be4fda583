"""Offline knowledge cards: stated mechanisms and known facts of GPU performance work, each with
its conditions (SM architecture range, CUDA driver/toolkit/driver versions, library versions,
dtypes, shapes), the phenomena it addresses and its sources.

Pure data and matching (no file or ledger access): :mod:`perfledger.knowledge.cards` validates a
card's TOML text, :mod:`perfledger.knowledge.matching` compares cards with an environment
identity. Reading card files (the shipped ones in ``cards/`` and a user's ``--cards DIR``)
happens in the application layer, :mod:`perfledger.app.knowledge`. A query never decides:
it says how each card's conditions compare with the environment, and an empty result blocks
nothing (R6: it is diagnostic context, never a refusal).
"""
