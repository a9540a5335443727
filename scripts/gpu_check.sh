#!/usr/bin/env bash
# One short GPU check (~10 min): installs the [gpu] extra (vLLM, DeepSpeed) into .venv-gpu, then measures
# vLLM vs HF rollout tokens/s, a vLLM weight sync and a few DeepSpeed ZeRO-2 steps. Results: outputs/gpu_check.json
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-outputs}"
python3 -m venv .venv-gpu
. .venv-gpu/bin/activate
pip install -q --upgrade pip
pip install -q -e ".[gpu]"     # vLLM brings its own CUDA torch
python experiments/gpu_check.py --out "$OUT/gpu_check.json"
