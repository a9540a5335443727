"""The real-model pipeline on one GPU, one PASS/FAIL line per check (a few minutes; part of scripts/gpu_check.sh).

A small HF-format checkpoint (random-weight Llama, byte-level BPE tokenizer trained on the env's text) goes
through the pipeline as `model=hf model.name_or_path=<folder>`, each run a subprocess of experiments/run.py:

  vllm_gpu_lora       engine=vllm trainer=gpu, LoRA adapters kept: collect sft experience synthetic_rl s2r eval
  deepspeed_zero2     engine=hf trainer=deepspeed (ZeRO-2): collect sft rl eval
  zero3_refused       trainer=deepspeed trainer.strategy.stage=3 fails before any work, naming the key
  hf_on_gpu           engine=hf trainer=gpu: a generating model is moved to cuda:<local rank>

    python experiments/gpu_pipeline_check.py --out outputs/gpu_pipeline_check.json
    python experiments/gpu_pipeline_check.py --cpu    # the same on CPU (engine=hf, trainer=cpu; no DeepSpeed)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ENV = ["env=webshop_tiny", "env.num_products=60", "env.num_test=20", "env.num_val=10", "env.max_steps=4"]
SMALL = [*ENV, "model.lora.r=8", "model.lora.alpha=16", "collect.agents.oracle=20", "collect.agents.noisy_oracle=10",
         "collect.agents.random=6", "sft.num_trajectories=8", "sft.max_steps=5", "sft.warmup_steps=1", "sft.lr=1e-3",
         "eval.num_goals=8", "eval.curve_every=0", "algo.group_size=2", "algo.max_new_tokens=8", "algo.lr=1e-4",
         "experience.max_transitions=60", "experience.max_steps=5", "experience.warmup_steps=1",
         "experience.judge_steps=8", "experience.onpolicy_episodes=2", "experience.max_new_tokens=48",
         "curriculum.train_examples=8", "synthetic_rl.synthetic_budget=16", "synthetic_rl.tasks_per_iter=2",
         "s2r.real_budget=16", "s2r.tasks_per_iter=2", "rl.real_budget=16", "rl.tasks_per_iter=2",
         "trainer.enable_progress_bar=false"]
S2R = "stages=[collect,sft,experience,synthetic_rl,s2r,eval]"


def pipeline(folder: Path, run_dir: Path, args: list[str], timeout: int) -> tuple[bool, str]:
    cmd = [sys.executable, str(ROOT / "experiments" / "run.py"), "model=hf", f"model.name_or_path={folder}",
           *SMALL, *args, f"hydra.run.dir={run_dir}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s"
    if out.returncode != 0:
        return False, (out.stdout + out.stderr)[-1500:]
    return True, ""


def completed(run_dir: Path, stages: list[str]) -> str:
    done = json.loads((run_dir / "stages.json").read_text())["completed"]
    return "" if done == stages else f"completed {done}, expected {stages}"


def check_lora_pipeline(folder: Path, work: Path, cpu: bool) -> str:
    run_dir = work / "lora"
    device = ["engine=hf", "trainer=cpu", "model.dtype=float32"] if cpu else \
        ["engine=vllm", "trainer=gpu", "model.dtype=bfloat16"]
    ok, err = pipeline(folder, run_dir, [S2R, *device], 240)
    if not ok:
        return err
    from dreamgym_pl.models import load_pretrained

    for st in ("sft", "experience", "synthetic_rl", "s2r"):
        model, _ = load_pretrained(run_dir / "checkpoints" / st, "float32")
        if type(model).__name__ != "PeftModelForCausalLM" or not any(p.requires_grad for p in model.parameters()):
            return f"checkpoints/{st} reloads as {type(model).__name__} without trainable LoRA weights"
    return completed(run_dir, ["collect", "sft", "experience", "synthetic_rl", "s2r", "eval"])


def check_zero2(folder: Path, work: Path) -> str:
    run_dir = work / "zero2"
    ok, err = pipeline(folder, run_dir, ["stages=[collect,sft,rl,eval]", "engine=hf", "trainer=deepspeed",
                                         "trainer.devices=1", "model.dtype=bfloat16"], 150)
    return err if not ok else completed(run_dir, ["collect", "sft", "rl", "eval"])


def check_zero3_refused() -> str:
    from hydra import compose, initialize_config_dir

    from dreamgym_pl.config import ConfigError, validate

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["trainer=deepspeed", "trainer.strategy.stage=3"])
    try:
        validate(cfg)
    except ConfigError as e:
        return "" if str(e).startswith("trainer.strategy.stage: ZeRO-3") else f"refused for another reason: {e}"
    return "ZeRO-3 was accepted"


def check_placement(folder: Path, work: Path, cpu: bool) -> str:
    import torch
    from hydra import compose, initialize_config_dir

    from dreamgym_pl.models import load_pretrained
    from dreamgym_pl.rollout.sampling import SamplingParams
    from dreamgym_pl.stages import Run

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["model=hf", f"model.name_or_path={folder}", *SMALL, "engine=hf",
                                                       "trainer=cpu" if cpu else "trainer=gpu"])
    run = Run(cfg, work / "placement")
    model, tok = load_pretrained(folder, "float32", lora=dict(cfg.model.lora))
    eng = run.engine_for("experience", model, tok)
    want = torch.device("cpu") if cpu else torch.device("cuda", 0)
    got = next(model.parameters()).device
    if got != want:
        return f"the experience model generates on {got}, not {want}"
    eng.generate(["task : buy tea observation : search action :"], SamplingParams(temperature=0.0, max_new_tokens=4))
    return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/gpu_pipeline_check.json")
    ap.add_argument("--cpu", action="store_true", help="dry run on CPU: engine=hf, trainer=cpu, DeepSpeed skipped")
    args = ap.parse_args()
    from hydra import compose, initialize_config_dir

    from dreamgym_pl.models import write_hf_checkpoint
    from dreamgym_pl.stages import Run

    work = Path(tempfile.mkdtemp(prefix="dreamgym_gpu_pipeline_"))
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=ENV)
    folder = write_hf_checkpoint(work / "hf_llama", Run(cfg, work / "corpus").tokenizer_corpus(), vocab_size=4000,
                                 hidden_size=256, num_layers=2, num_heads=4, intermediate_size=512,
                                 max_positions=4096)
    checks = {"vllm_gpu_lora": lambda: check_lora_pipeline(folder, work, args.cpu),
              "deepspeed_zero2": (lambda: "SKIP") if args.cpu else (lambda: check_zero2(folder, work)),
              "zero3_refused": check_zero3_refused,
              "hf_on_gpu": lambda: check_placement(folder, work, args.cpu)}
    results = {}
    for name, fn in checks.items():
        t0 = time.perf_counter()
        try:
            err = fn()
        except Exception as e:  # a check that crashes fails; the others still run
            err = f"{type(e).__name__}: {e}"
        status = "SKIP" if err == "SKIP" else ("PASS" if not err else "FAIL")
        results[name] = {"status": status, "seconds": round(time.perf_counter() - t0, 1),
                         "error": err if status == "FAIL" else ""}
        print(f"{status} {name} ({results[name]['seconds']} s){'' if status != 'FAIL' else ': ' + err.strip()[-600:]}",
              flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    sys.exit(0 if all(r["status"] != "FAIL" for r in results.values()) else 1)


if __name__ == "__main__":
    main()
