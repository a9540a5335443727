"""One short GPU check (a few minutes on one GPU): vLLM vs HF rollout throughput, vLLM weight sync, and a
few DeepSpeed ZeRO-2 steps, on a random-weight Llama (~110M parameters) with a word tokenizer trained here.

    bash scripts/gpu_check.sh            # installs the [gpu] extra, then runs this
    python experiments/gpu_check.py --out outputs/gpu_check.json

Prints a Markdown table and writes the numbers as JSON. Each part is independent: a failing part records its
error and the others still run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from dreamgym_pl.envs.base import make_vec_env  # noqa: E402
from dreamgym_pl.models import build_tiny_llama, num_params, train_word_tokenizer  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402
from dreamgym_pl.rollout.sampling import SamplingParams  # noqa: E402


def prompts_and_tokenizer(n: int):
    env = make_vec_env("webshop", num_products=300, num_test=50)
    tasks = env.tasks("train")[:n]
    obs = env.reset(tasks)
    prompts = [f"task : {t.instruction} \n observation : {o.text} \n action :" for t, o in zip(tasks, obs)]
    tok = train_word_tokenizer(prompts + [t.instruction for t in env.tasks("test")], vocab_size=8000)
    return prompts, tok


def throughput(engine, prompts, params, reps: int = 3) -> float:
    engine.generate(prompts[:8], params)  # warm-up
    t0, toks = time.perf_counter(), 0
    for _ in range(reps):
        toks += sum(len(c.token_ids) for c in engine.generate(prompts, params))
    return toks / (time.perf_counter() - t0)


def seq_logprob(model, tok, prompt: str, completion_ids: list[int]) -> float:
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"].to(model.device)
    full = torch.cat([ids, torch.tensor([completion_ids], device=model.device)], dim=1)
    with torch.no_grad():
        logits = model(full).logits[0, ids.shape[1] - 1:-1].float()
    return float(torch.log_softmax(logits, -1).gather(-1, full[0, ids.shape[1]:, None]).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/gpu_check.json")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    assert torch.cuda.is_available(), "gpu_check needs a CUDA GPU"
    res: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    prompts, tok = prompts_and_tokenizer(args.prompts)
    model = build_tiny_llama(tok, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=2048,
                             max_positions=2048, seed=0).to("cuda", torch.bfloat16)
    res["params_m"] = num_params(model) / 1e6
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    # 1. HF generate vs vLLM
    try:
        res["hf_tokens_per_s"] = throughput(HFEngine(model, tok, micro_batch=64), prompts, params)
    except Exception as e:
        res["hf_error"] = f"{type(e).__name__}: {e}"
    vllm_engine = None
    try:
        from dreamgym_pl.rollout.vllm_engine import VLLMEngine

        t0 = time.perf_counter()
        vllm_engine = VLLMEngine(model, tok, gpu_memory_utilization=0.3, max_model_len=2048)
        res["vllm_start_s"] = time.perf_counter() - t0
        res["vllm_tokens_per_s"] = throughput(vllm_engine, prompts, params)
        res["vllm_over_hf"] = res["vllm_tokens_per_s"] / res.get("hf_tokens_per_s", float("nan"))
    except Exception as e:
        res["vllm_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    # 2. weight sync: after perturbing the trainer's weights, vLLM's log-probs must follow HF's
    if vllm_engine is not None:
        try:
            greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
            c = vllm_engine.generate(prompts[:1], greedy)[0]
            before_v = sum(c.logprobs)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.02)
            hf_after = seq_logprob(model, tok, prompts[0], c.token_ids)
            stale = vllm_engine.generate(prompts[:1], greedy)[0]
            t0 = time.perf_counter()
            vllm_engine.load_weights(model)
            res["weight_sync_s"] = time.perf_counter() - t0
            fresh = vllm_engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_new_tokens=16))[0]
            res.update(logprob_before_sync=before_v, hf_logprob_after_perturb=hf_after,
                       vllm_stale_logprob=sum(stale.logprobs),
                       vllm_synced_same_tokens=fresh.token_ids == c.token_ids)
            # compare on the same tokens: score the synced engine's own greedy completion with HF
            res["vllm_synced_logprob"] = sum(fresh.logprobs)
            res["hf_logprob_of_synced_completion"] = seq_logprob(model, tok, prompts[0], fresh.token_ids)
            res["sync_abs_diff"] = abs(res["vllm_synced_logprob"] - res["hf_logprob_of_synced_completion"])
            vllm_engine.sleep()
            res["sleep_wake_ok"] = bool(vllm_engine.generate(prompts[:2], greedy))
            vllm_engine.close()
        except Exception as e:
            res["sync_error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    # 3. DeepSpeed ZeRO-2 through Lightning
    try:
        import lightning as L
        from lightning.pytorch.strategies import DeepSpeedStrategy

        from dreamgym_pl.policy.algos import SFT
        from dreamgym_pl.policy.module import PolicyModule
        from dreamgym_pl.policy.samples import StepSample, collate

        torch.cuda.empty_cache()
        m = build_tiny_llama(tok, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=2048, seed=1)
        module = PolicyModule(m, tok, SFT(), lr=1e-4)
        ids = [tok(p, add_special_tokens=False)["input_ids"][:200] for p in prompts[:64]]
        samples = [StepSample(i[:-8], i[-8:]) for i in ids]
        batches = [collate(samples[j:j + 8], tok.pad_token_id) for j in range(0, 64, 8)]
        trainer = L.Trainer(accelerator="gpu", devices=1, strategy=DeepSpeedStrategy(stage=2), precision="bf16-mixed",
                            max_steps=20, logger=False, enable_checkpointing=False, enable_progress_bar=False)
        t0 = time.perf_counter()
        trainer.fit(module, torch.utils.data.DataLoader(batches * 3, batch_size=None))
        res["deepspeed_zero2_steps"] = trainer.global_step
        res["deepspeed_zero2_s_per_step"] = (time.perf_counter() - t0) / max(1, trainer.global_step)
        res["deepspeed_final_loss"] = float(trainer.callback_metrics.get("loss", float("nan")))
    except Exception as e:
        res["deepspeed_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print("| check | value |\n|---|---|")
    for k, v in res.items():
        print(f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |")
    verdicts = {"hf_generate": "hf_tokens_per_s" in res, "vllm_generate": "vllm_tokens_per_s" in res,
                # 16 greedy tokens in bf16: vLLM's summed log-prob within 1 nat of HF's after the sync
                "vllm_weight_sync": res.get("sync_abs_diff", float("inf")) < 1.0,
                "vllm_sleep_wake": res.get("sleep_wake_ok") is True,
                "deepspeed_zero2_steps": res.get("deepspeed_zero2_steps") == 20}
    for k, ok in verdicts.items():
        print(f"{'PASS' if ok else 'FAIL'} {k}")


if __name__ == "__main__":
    main()
