"""Peer reference values kept as fixtures (see README.md): the seeded inputs (``inputs``), the script that asks
the peer libraries for their values (``make_fixtures``) and the values it wrote (``peers.json``)."""

#: top-level modules of the peer libraries: not installed by the test extra (their pins clash with the project's),
#: so their live drift checks may skip in CI; every other missing import fails there (tests/no_silent_skips.py)
OPTIONAL_PEERS = frozenset({"wefe", "irrCAC", "recommenders", "kiez", "lightning", "pytorch_lightning"})
