#!/bin/sh
# The check of the simulated device against a real GPU, on a machine with no network that has
# torch (CUDA), click, pathspec, pyyaml, numpy, pytest and setuptools, but neither libcst nor this
# project. From the repository root, with the wheels of .whl/ carried along (libcst for that
# machine's Python, setuptools >= 77 for the build; see README "On a real GPU"):
#
#   sh benchmarks/gpu_check.sh            # writes $OUT/gpu_check.json ($OUT defaults to .)
#
# The project is installed with libcst into a folder of its own, put first on PYTHONPATH (verify's
# children inherit it), then benchmarks/gpu_check.py runs within BUDGET_S seconds (default 420).
# Extra arguments go to gpu_check.py (--device sim, --only PATTERN, --jobs N).
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/cpu2gpu-site}
OUT=${OUT:-.}
rm -rf "$SITE"
# No index: the build's setuptools comes from .whl/ too (pip's isolated build environment).
"$PY" -m pip install -q --no-index --find-links .whl --no-deps --target "$SITE" .whl/libcst-*.whl .
PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
mkdir -p "$OUT"
exec "$PY" benchmarks/gpu_check.py --out "$OUT/gpu_check.json" --budget-s "${BUDGET_S:-420}" "$@"
