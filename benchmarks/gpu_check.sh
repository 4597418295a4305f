#!/usr/bin/env bash
# The device check of a lent GPU machine (benchmarks/README.md, "On a lent GPU machine").
#
#   bash benchmarks/gpu_check.sh prepare       # here, where pip reaches a registry
#   bash benchmarks/gpu_check.sh quick         # there: pytest -m gpu, the RMM pool, gpu.py --quick
#   bash benchmarks/gpu_check.sh job NAME [SIDE]   # there: one full job a call (SIDE: floor|npt)
#
# `prepare` fills build/gpu-check/ (ignored through .gitignore's build/; about 25 MB), the
# one folder the lent machine needs carried: mnist.npz, and the wheels its image lacks. The
# image (Python 3.12, x86-64) has CuPy 14 for CUDA 13 with the CUDA libraries, numpy,
# scipy, scikit-learn, pandas, xarray, psutil and pytest, and no package registry. The
# wheels: npt-dask's dependencies at the versions the gpu extra resolves to (dask and
# distributed pinned by dask-cuda 26.10) and the rest of the gpu extra (dask-cuda, RMM).
# On the lent machine they are installed with --no-deps into /tmp/site, as its notes say.
# Results go to $OUT (the device tool's folder that comes back), else results/gpu-check.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=build/gpu-check
PY=${PYTHON:-python3}
WHEELS=(
    dask==2026.7.1 distributed==2026.7.1 partd==1.4.2 locket==1.0.0 tornado==6.6.1
    tblib==3.2.2 zict==3.0.0 zarr==3.1.6 numcodecs==0.16.6 donfig==0.8.1.post1
    google-crc32c==1.9.0 array-api-compat==1.16.0 xarray==2026.9.0
    dask-cuda==26.10.0 rapids-dask-dependency==26.10.0 rmm-cu13==26.10.0
    librmm-cu13==26.10.0 rapids-logger==0.3.0
)
PLATFORMS=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    PLATFORMS+=(--platform "${tag}_x86_64")
done

case "${1:-}" in
prepare)
    mkdir -p "$CARRY/wheels" "$CARRY/data"
    cp "${NPT_DATA_DIR:-../shared/data}/mnist.npz" "$CARRY/data/"
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${PLATFORMS[@]}" -d "$CARRY/wheels" "${WHEELS[@]}"
    du -sh "$CARRY"
    ;;
quick | job)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$CARRY"/wheels/*.whl
    export PYTHONPATH="/tmp/site:$PWD" NPT_DATA_DIR="$PWD/$CARRY/data" PYTHONUNBUFFERED=1
    out=${OUT:-results/gpu-check}
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    "$PY" -c "import importlib.metadata as m; print(*(f'{p} {m.version(p)}' for p in ('cupy-cuda13x', 'dask', 'distributed', 'dask-cuda', 'rmm-cu13', 'numpy')), sep=', ')" || true
    if [ "$1" = quick ]; then
        # the routes on real CuPy (the stand-in suite's twin), then the RMM pool
        "$PY" -m pytest tests/gpu -m gpu -q -o addopts="" -p no:cacheprovider \
            >"$out/pytest-gpu.log" 2>&1 || true
        tail -n 15 "$out/pytest-gpu.log"
        "$PY" cluster/gpu/check_pool.py --rmm-pool-size 16GB >"$out/pool.json" || true
        cat "$out/pool.json"
        "$PY" benchmarks/gpu.py --quick --store "$out/quick" >/dev/null
        "$PY" benchmarks/gpu.py --summary "$out/quick"
    else
        mkdir -p "$out/full"  # a side stored by an earlier call, carried back: kept
        if [ -f "$CARRY/full/$2.json" ]; then cp "$CARRY/full/$2.json" "$out/full/"; fi
        "$PY" benchmarks/gpu.py --job "$2" --side "${3:-both}" --store "$out/full" >/dev/null
        "$PY" benchmarks/gpu.py --summary "$out/full"
    fi
    ;;
*)
    echo "usage: bash benchmarks/gpu_check.sh prepare | quick | job NAME [floor|npt]" >&2
    exit 2
    ;;
esac
