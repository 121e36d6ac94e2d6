#!/usr/bin/env bash
# The checks only a GPU can run (CI has none; run them where a GPU is visible): the CUDA tests of
# the decode engine, the IPC weight transfer and the trainer on CUDA, then benchmarks/gpu_decode.py at
# issue 28's shapes with compiled steps (the uncompiled engine runs in the same process for the ratio).
#   bash scripts/gpu_check.sh [OUT_DIR]        (default: $OUT, else ./gpu_check_out)
# Each benchmark prints one JSON object into OUT_DIR/gpu_decode_<geometry>.json; record a result
# with `python benchmarks/record.py` as for any other benchmark (see docs/benchmarks.md).
# On a machine without the repo's Python dependencies (a lent GPU box whose image has torch and
# transformers only), GPU_CHECK_WHEELS=DIR installs the wheels in DIR (pydantic, orjson, ...) into a
# private folder first and puts it and the repo on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu_check_out}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -n "${GPU_CHECK_WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site \
    "$GPU_CHECK_WHEELS"/*.whl || exit 2
  export PYTHONPATH=/tmp/gpu_check_site:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "gpu_check: torch sees no CUDA device")' || exit 2
timeout 240 python3 -m pytest -q -p no:cacheprovider -o addopts="" -rfEs tests/model_server/test_decode_engine_cuda.py \
  tests/model_server/test_ipc_transfer_cuda.py tests/trainer/test_device.py 2>&1 | tee "$out/pytest.txt" | tail -25
status=${PIPESTATUS[0]}
for shape in "qwen2.5-0.5b 16" "qwen2.5-1.5b 32"; do
  read -r geometry prompts <<< "$shape"
  echo "gpu_check: gpu_decode $geometry, $prompts prompts x 8 generations, 96 + 256 tokens, --compile"
  timeout 420 python3 benchmarks/gpu_decode.py --geometry "$geometry" --prompts "$prompts" --generations 8 \
    --prompt-tokens 96 --new-tokens 256 --device cuda --compile --skip generate,train \
    > "$out/gpu_decode_$geometry.json" 2> "$out/gpu_decode_$geometry.err" || status=1
  tail -c 1200 "$out/gpu_decode_$geometry.json"; echo; tail -n 5 "$out/gpu_decode_$geometry.err"
done
exit "$status"
