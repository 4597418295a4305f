"""The device route tests: ``xp_backend`` (the CuPy stand-in always, real CuPy where CUDA is).

``NPT_STANDIN_SURVEY=path.json`` writes the route survey there at the end of the session:
for each test, its outcome, where a failing one stopped (the deepest ``npt_dask`` frame and
the error) and the stand-in's counts per phase (``tests/gpu/test_routes.py`` ``COUNTS``).
"""

from __future__ import annotations

import json
import os
import traceback
from typing import Any

from tests.standin.harness import xp_backend  # noqa: F401  (the fixture)

_OUTCOMES: dict[str, dict[str, Any]] = {}


def pytest_runtest_makereport(item: Any, call: Any) -> None:
    if call.when != "call" or not os.environ.get("NPT_STANDIN_SURVEY"):
        return
    entry: dict[str, Any] = {"outcome": "passed" if call.excinfo is None else "failed"}
    if call.excinfo is not None:
        frames = traceback.extract_tb(call.excinfo.tb)
        ours = [f for f in frames if "/npt_dask/" in f.filename] or frames
        entry["where"] = f"{ours[-1].filename.split('/npt_dask/')[-1]}:{ours[-1].lineno}"
        entry["error"] = f"{call.excinfo.typename}: {str(call.excinfo.value)[:300]}"
    _OUTCOMES[item.name] = entry


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    path = os.environ.get("NPT_STANDIN_SURVEY")
    if not path:
        return
    from tests.gpu import test_routes

    survey = {name: {**entry, "counts": test_routes.COUNTS.get(name, {})}
              for name, entry in _OUTCOMES.items()}  # fmt: skip
    with open(path, "w") as f:
        json.dump(survey, f, indent=1, sort_keys=True)
