#!/usr/bin/env bash
# Set up attnlab in ./.venv from a bare python3 (3.11+).
#   scripts/setup.sh        the package (train, translate, evaluate, inspect, serve)
#   scripts/setup.sh dev    + test and lint tools (pytest, hypothesis, ruff, playwright's Python API)
# torch is pinned to a CPU-capable release: an unpinned `torch` can pull a multi-GB CUDA build onto a
# CPU-only machine. To install from a specific wheel index (a CPU-only or a CUDA one), set
# ATTNLAB_TORCH_INDEX to that index's URL.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${ATTNLAB_TORCH_VERSION:-2.13.0}
if [ ! -x .venv/bin/python ]; then
  "$PY" -c 'import sys; assert sys.version_info >= (3, 11), "attnlab needs Python 3.11 or newer"'
  "$PY" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if [ -n "${ATTNLAB_TORCH_INDEX:-}" ]; then
    pip install "torch==${TORCH_VERSION}" --index-url "$ATTNLAB_TORCH_INDEX"
  else
    pip install "torch==${TORCH_VERSION}"
  fi
fi
extras="web"
[ "${1:-}" = "dev" ] && extras="web,dev"
pip install -e ".[${extras}]"
echo "attnlab is set up in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
