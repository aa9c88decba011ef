#!/usr/bin/env bash
# Set up attnlab in ./.venv from a bare python3 (3.11+).
#   scripts/setup.sh        the package (train, translate, evaluate, inspect, serve, export) with the web, explain
#                           and ct2 extras: every command of the README's "Five minutes with attnlab" runs after it
#   scripts/setup.sh dev    + test and lint tools (pytest, hypothesis, ruff, Babel, playwright's Python API, nbclient and
#                           ipykernel, which run examples/notes_tour.ipynb in tests/test_notebook.py) and the
#                           align extra (NLTK, for `attnlab align`'s IBM Model 2 baseline) and the tensorboard
#                           extra (train.tensorboard=true; its tests read the event files back)
# torch comes first, pinned to ATTNLAB_TORCH_VERSION (default 2.13.0: the release CI tests, and the floor
# pyproject.toml declares). The pin picks the version, not the build: whether pip installs a CPU-only or
# a CUDA build depends on where it finds torch. For Linux x86-64 the default package index serves the
# CUDA build (several GB with its CUDA libraries); a CPU-only build comes from PyTorch's CPU-only wheel
# index, or from a local wheel folder named in pip's own configuration (find-links), which is where this
# project's development and CI machines get theirs. ATTNLAB_TORCH_INDEX=URL installs torch from that
# index instead of the default one (a CPU-only index, or the CUDA one that matches your driver).
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
# explain: Captum, for the integrated-gradients row the demo prints beside each attention map (notes §1);
# ct2: CTranslate2, for the README guide's `attnlab export --format ctranslate2` and `--engine ctranslate2`
extras="web,explain,ct2"
[ "${1:-}" = "dev" ] && extras="web,dev,align,tensorboard,ct2,explain"
pip install -e ".[${extras}]"
# A CJK font, so figures draw Chinese labels (--lang zh) and CJK tokens (attnlab/viz/fonts.py falls
# back to it). Debian's fonts-noto-cjk where apt-get can install it (root, or sudo without a password);
# otherwise one line says how, and setup goes on: figures still draw, with boxes for the missing glyphs.
cjk_font() {
  dpkg -s fonts-noto-cjk >/dev/null 2>&1 && return 0
  local su=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && su="sudo -n" || return 1
  fi
  command -v apt-get >/dev/null 2>&1 || return 1
  local get="$su env DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends install fonts-noto-cjk"
  $get >/dev/null 2>&1 || { $su apt-get -qq update >/dev/null 2>&1 && $get >/dev/null 2>&1; }
}
# Only for `dev` (the tests draw Chinese) or ATTNLAB_LANG=zh: the package is large, and the demo's minutes
# (README command 1) are the learner's.
case "${1:-}:${ATTNLAB_LANG:-}" in
  dev:*|*:zh*)
    cjk_font || echo "note: Chinese figure labels need a CJK font: sudo apt-get install fonts-noto-cjk (Debian/Ubuntu; \
elsewhere any Noto Sans CJK font); setup goes on without it" ;;
esac
echo "attnlab is set up in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
