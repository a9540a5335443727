#!/usr/bin/env bash
# One command that checks a GPU node (about 10 minutes on one GPU): installs the [gpu] extra (vLLM, DeepSpeed)
# into .venv-gpu, then
#   experiments/gpu_check.py           vLLM vs HF rollout tokens/s, a vLLM weight sync, sleep/wake, DeepSpeed ZeRO-2 steps
#   experiments/gpu_pipeline_check.py  the real-model pipeline (HF-format Llama + BPE tokenizer, LoRA) with engine=vllm
#                                      trainer=gpu, with trainer=deepspeed (ZeRO-2), ZeRO-3 refused, HF models on the GPU
# Each check prints PASS or FAIL; results in outputs/gpu_check.json and outputs/gpu_pipeline_check.json.
# SKIP_INSTALL=1 reuses an environment that already has the [gpu] extra.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-outputs}"
if [ -z "${SKIP_INSTALL:-}" ]; then
  python3 -m venv .venv-gpu
  . .venv-gpu/bin/activate
  pip install -q --upgrade pip
  pip install -q -e ".[gpu]"     # vLLM brings its own CUDA torch
fi
status=0
timeout 600 python experiments/gpu_check.py --out "$OUT/gpu_check.json" || { echo "FAIL gpu_check.py (rc $?)"; status=1; }
timeout 420 python experiments/gpu_pipeline_check.py --out "$OUT/gpu_pipeline_check.json" || status=1
exit $status
