"""The stand-in's packages are imported as ``cupy``/``cupyx`` by ``tests/standin/harness.py``,
never collected as test modules (``--doctest-modules`` would import them under their own
names)."""

from tests.standin.harness import xp_backend  # noqa: F401  (the fixture)

collect_ignore = ["cupy", "cupyx"]
