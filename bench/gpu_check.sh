#!/usr/bin/env bash
# GPU check: on a machine with a CUDA GPU — an H200 when the device tool lends one — run the
# tests marked `gpu`, one budgeted training run on CUDA (1 minute, then scored), then the throughput
# benchmark on CUDA: tokens/s and MFU against the bf16 matmul
# peak that bench/throughput.py measures in the same run (training runs under bf16 autocast there).
# Budget: under 7 minutes. Nothing is written to bench/RESULTS.md (the full CPU run owns it); the
# output is the report.
#
#   bash bench/gpu_check.sh                      # python3 from PATH (needs torch with CUDA, pytest)
#   PYTHON=/opt/venv/bin/python bash bench/gpu_check.sh
#   ATTNLAB_DATA_DIR=/path/with/fra-eng.zip bash bench/gpu_check.sh   # else the offline `numbers` task
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"  # no install needed
export ATTNLAB_OFFLINE=1  # never try to download the corpus from a sandboxed machine

echo "== device"
"$PY" - <<'PY'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"no CUDA device visible to torch {torch.__version__}: this script needs a GPU")
p = torch.cuda.get_device_properties(0)
print(f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs; torch {torch.__version__}, "
      f"CUDA {torch.version.cuda}, bf16 {torch.cuda.is_bf16_supported()}")
PY
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv || true

status=0
echo "== tests marked gpu"
if "$PY" -c "import pytest" 2>/dev/null; then
    timeout 120 "$PY" -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider || status=1
else
    echo "pytest is not installed for $PY: skipping the tests"; status=1
fi

echo "== one budgeted training run on CUDA: a 1-minute Transformer, sized for the GPU, then scored"
run_dir=$(mktemp -d)/gpu_run
data=$([ -n "${ATTNLAB_DATA_DIR:-}" ] && echo fra-eng || echo numbers)
timeout 150 "$PY" -m attnlab train --model transformer --dataset "$data" --max-minutes 1 --device cuda \
    --out "$run_dir" -q || status=1
timeout 90 "$PY" -m attnlab evaluate "$run_dir" --device cuda || status=1

echo "== throughput on CUDA, the CPU benchmark's batches (~1,100 tokens): ratios and MFU"
timeout 150 "$PY" bench/throughput.py --device cuda --quick --no-write || status=1

echo "== training throughput on CUDA with GPU-sized batches (16,384 tokens): tokens/s and MFU"
timeout 90 "$PY" bench/throughput.py --device cuda --quick --no-write --train-only --batch-tokens 16384 || status=1

exit $status
