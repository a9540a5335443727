"""One short GPU check (`make gpu-check`; a few minutes on one GPU, bounded to 10): what can only fail on a GPU, each
check one PASS/FAIL line with its reason, on random-weight Llamas with a word tokenizer trained here.

  hf_vs_vllm        HF generate and vLLM rollout throughput (tokens/s), printed (fails only if either cannot generate)
  vllm_weight_sync  after perturbing the trainer's weights, load_weights makes vLLM's log-probs follow HF's (< 1 nat)
  vllm_two_engines  a policy and an experience engine in one process: the policy's sleep also unmaps the experience
                    engine (one CuMemAllocator); each engine's next generate wakes the process; memory is released
  vllm_lora_sync    a PEFT policy (engine.lora=auto): only the adapter is shipped, and vLLM follows a changed adapter
  zero2_rl_step     GRPO steps under DeepSpeed ZeRO-2 bf16 through our Trainer setup (pre-batched loader, float32
                    old/ref log-probs and advantages at the loss: checked)
  zero2_resume      the ZeRO-2 optimizer partition saved, then restored into a new ZeRO-2 fit (state equal) that trains on
  zero2_ppo         PPO steps under ZeRO-2: the value head in DeepSpeed's bf16
  zero2_offload     ZeRO-2 with offload_optimizer=true: DeepSpeedCPUAdam (compiles DeepSpeed's cpu_adam op)

    make gpu-check                                  # = python experiments/gpu_check.py --out outputs/gpu_check.json
    python experiments/gpu_check.py --only zero2_rl_step zero2_resume

Writes the numbers and verdicts as JSON; exits 1 if any check failed. A check past its time share is reported as
failed and the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402

from dreamgym_pl.models import build_tiny_llama, train_word_tokenizer  # noqa: E402
from dreamgym_pl.rollout.sampling import SamplingParams  # noqa: E402

RES: dict = {}


def prompts_and_tokenizer(n: int):
    from dreamgym_pl.envs.base import make_vec_env

    env = make_vec_env("webshop", num_products=300, num_test=50)
    tasks = env.tasks("train")[:n]
    obs = env.reset(tasks)
    prompts = [f"task : {t.instruction} \n observation : {o.text} \n action :" for t, o in zip(tasks, obs)]
    tok = train_word_tokenizer(prompts + [t.instruction for t in env.tasks("test")], vocab_size=8000)
    return prompts, tok


def small_llama(tok, seed: int = 0, big: bool = False):
    if big:  # ~110M: the throughput comparison
        return build_tiny_llama(tok, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=2048,
                                max_positions=2048, seed=seed)
    return build_tiny_llama(tok, hidden_size=256, num_layers=4, num_heads=4, intermediate_size=512,
                            max_positions=2048, seed=seed)


def compose(overrides=()):
    from hydra import compose as hcompose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hcompose(config_name="config", overrides=list(overrides))


def seq_logprob(model, tok, prompt: str, completion_ids: list[int]) -> float:
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"].to(model.device)
    full = torch.cat([ids, torch.tensor([completion_ids], device=model.device)], dim=1)
    with torch.no_grad():
        logits = model(full).logits[0, ids.shape[1] - 1:-1].float()
    return float(torch.log_softmax(logits, -1).gather(-1, full[0, ids.shape[1]:, None]).sum())


def throughput(engine, prompts, params, reps: int = 2) -> float:
    engine.generate(prompts[:8], params)  # warm-up
    t0, toks = time.perf_counter(), 0
    for _ in range(reps):
        toks += sum(len(c.token_ids) for c in engine.generate(prompts, params))
    return toks / (time.perf_counter() - t0)


def close_all() -> None:
    from dreamgym_pl.rollout import vllm_engine

    for e in list(vllm_engine.LIVE):
        e.close()
    torch.cuda.empty_cache()


# ----- vLLM ------------------------------------------------------------------------------------------------------------
def check_hf_vs_vllm(ctx) -> str:
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.rollout.vllm_engine import VLLMEngine

    prompts, tok = ctx["prompts"], ctx["tok"]
    model = small_llama(tok, big=True).to("cuda", torch.bfloat16)
    params = SamplingParams(temperature=1.0, max_new_tokens=ctx["new_tokens"])
    RES["hf_tokens_per_s"] = throughput(HFEngine(model, tok, micro_batch=64), prompts, params)
    t0 = time.perf_counter()
    eng = VLLMEngine(model, tok, gpu_memory_utilization=0.3, max_model_len=2048)
    RES["vllm_start_s"] = time.perf_counter() - t0
    RES["vllm_tokens_per_s"] = throughput(eng, prompts, params)
    RES["vllm_over_hf"] = RES["vllm_tokens_per_s"] / RES["hf_tokens_per_s"]
    ctx["policy_engine"], ctx["policy_model"] = eng, model
    return ""


def check_vllm_weight_sync(ctx) -> str:
    eng, model, tok, prompts = ctx.get("policy_engine"), ctx.get("policy_model"), ctx["tok"], ctx["prompts"]
    if eng is None:
        return "no vLLM engine (hf_vs_vllm failed)"
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    c = eng.generate(prompts[:1], greedy)[0]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    stale = eng.generate(prompts[:1], greedy)[0]
    t0 = time.perf_counter()
    eng.load_weights(model)
    RES["weight_sync_s"] = time.perf_counter() - t0
    fresh = eng.generate(prompts[:1], greedy)[0]
    RES["vllm_synced_logprob"] = sum(fresh.logprobs)
    RES["hf_logprob_of_synced_completion"] = seq_logprob(model, tok, prompts[0], fresh.token_ids)
    RES["sync_abs_diff"] = abs(RES["vllm_synced_logprob"] - RES["hf_logprob_of_synced_completion"])
    RES["stale_abs_diff"] = abs(sum(stale.logprobs) - seq_logprob(model, tok, prompts[0], stale.token_ids))
    RES["synced_same_tokens_as_before"] = fresh.token_ids == c.token_ids
    if RES["sync_abs_diff"] >= 1.0:
        return f"vLLM's log-prob {RES['vllm_synced_logprob']:.3f} vs HF's {RES['hf_logprob_of_synced_completion']:.3f}"
    return ""


def check_vllm_two_engines(ctx) -> str:
    from dreamgym_pl.rollout.vllm_engine import ProcessSleep, VLLMEngine

    tok, prompts = ctx["tok"], ctx["prompts"]
    policy = ctx.get("policy_engine")
    if policy is None:
        policy = VLLMEngine(small_llama(tok).to("cuda", torch.bfloat16), tok, gpu_memory_utilization=0.3,
                            max_model_len=2048)
    experience = VLLMEngine(small_llama(tok, seed=3).to("cuda", torch.bfloat16), tok, gpu_memory_utilization=0.3,
                            max_model_len=2048)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    before_e = experience.generate(prompts[:4], greedy)
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    policy.sleep()  # the rollouts' end: both engines' memory released
    free1 = torch.cuda.mem_get_info()[0]
    RES["two_engines_freed_gib"] = (free1 - free0) / 2 ** 30
    if ProcessSleep.sleeper is not policy:
        return "the policy's sleep was not recorded"
    after_e = experience.generate(prompts[:4], greedy)  # the curriculum's generation, the policy asleep
    if [c.token_ids for c in after_e] != [c.token_ids for c in before_e]:
        return "the experience engine generated other greedy tokens after the policy's sleep and wake"
    experience.sleep()
    policy.generate(prompts[:2], greedy)
    experience.generate(prompts[:2], greedy)
    if free1 - free0 < 2 ** 28:
        return f"sleeping released only {RES['two_engines_freed_gib']:.2f} GiB"
    return ""


def check_vllm_lora_sync(ctx) -> str:
    from peft import LoraConfig, get_peft_model

    from dreamgym_pl.rollout.vllm_engine import VLLMEngine

    close_all()
    ctx.pop("policy_engine", None)
    tok, prompts = ctx["tok"], ctx["prompts"]
    base = small_llama(tok, seed=5).to("cuda", torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    eng = VLLMEngine(model, tok, gpu_memory_utilization=0.3, max_model_len=2048, max_lora_rank=8)
    if not eng.use_lora:
        return "the PEFT policy did not get a LoRA engine"
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    eng.generate(prompts[:1], greedy)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(torch.randn_like(p) * 0.05)
    eng.sleep()
    eng.load_weights(model)  # wakes, ships the adapter only
    fresh = eng.generate(prompts[:1], greedy)[0]
    RES["lora_vllm_logprob"] = sum(fresh.logprobs)
    RES["lora_hf_logprob"] = seq_logprob(model, tok, prompts[0], fresh.token_ids)
    RES["lora_abs_diff"] = abs(RES["lora_vllm_logprob"] - RES["lora_hf_logprob"])
    eng.close()
    if RES["lora_abs_diff"] >= 1.0:
        return f"vLLM's log-prob with the new adapter {RES['lora_vllm_logprob']:.3f} vs HF's {RES['lora_hf_logprob']:.3f}"
    return ""


# ----- DeepSpeed ZeRO-2 --------------------------------------------------------------------------------------------
def rl_batches(module, tok, prompts, n: int, ppo: bool):
    from dreamgym_pl.policy.samples import StepSample, collate

    module.to("cuda")
    ids = [tok(p, add_special_tokens=False)["input_ids"][:120] for p in prompts[:8 * n]]
    g = torch.Generator().manual_seed(0)
    batches = []
    for j in range(n):
        chunk = [StepSample(i[:-6], i[-6:], traj=k, scalars={"adv": float(torch.randn(1, generator=g)),
                                                               "returns": float(torch.rand(1, generator=g)),
                                                               "old_values": 0.0})
                 for k, i in enumerate(ids[8 * j:8 * j + 8])]
        b = collate(chunk, tok.pad_token_id)
        dev = {k: v.to("cuda") for k, v in b.items()}
        b["old_logp"] = module.logprobs(dev).cpu()
        if module.objective.needs_reference:
            b["ref_logp"] = module.logprobs(dev, reference=True).cpu()
        if ppo:
            b["old_values"] = module.values(dev).cpu()
        batches.append(b)
    module.to("cpu")
    return batches


def zero2_trainer(steps: int, callbacks=(), offload: bool = False):
    import lightning as L
    from lightning.pytorch.strategies import DeepSpeedStrategy

    from dreamgym_pl.policy.zero import configure_trainer

    trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=steps, logger=False,
                        strategy=DeepSpeedStrategy(stage=2, offload_optimizer=offload), enable_checkpointing=False,
                        enable_progress_bar=False, callbacks=list(callbacks), gradient_clip_val=1.0)
    return configure_trainer(trainer)  # what Run.trainer does: logging batch size, float32 batches


def rl_module(tok, algo: str, seed: int = 1):
    from dreamgym_pl.policy.algos import rl_algorithm
    from dreamgym_pl.policy.module import PolicyModule

    return PolicyModule(small_llama(tok, seed=seed), tok, rl_algorithm(compose([f"algo={algo}"]).algo), lr=1e-4)


class LossDtypes:
    """Records the dtypes of the float batch entries the objective's loss is given."""

    def __init__(self, module):
        self.seen: dict[str, set] = {}
        loss = module.objective.loss

        def spy(m, batch, out, logp):
            for k in ("old_logp", "ref_logp", "adv", "returns", "old_values"):
                if k in batch:
                    self.seen.setdefault(k, set()).add(str(batch[k].dtype))
            return loss(m, batch, out, logp)

        module.objective.loss = spy

    def error(self) -> str:
        bad = {k: v for k, v in self.seen.items() if v != {"torch.float32"}}
        return f"the loss saw {bad}" if bad else ("" if self.seen else "the loss saw no RL batch")


def check_zero2_rl_step(ctx) -> str:
    tok = ctx["tok"]
    module = rl_module(tok, "grpo")
    batches = rl_batches(module, tok, ctx["prompts"], 4, ppo=False)
    spy = LossDtypes(module)
    trainer = zero2_trainer(6)
    t0 = time.perf_counter()
    trainer.fit(module, torch.utils.data.DataLoader(batches * 2, batch_size=None))
    RES["zero2_s_per_step"] = (time.perf_counter() - t0) / max(1, trainer.global_step)
    RES["zero2_final_loss"] = float(trainer.callback_metrics.get("loss", float("nan")))
    if trainer.global_step != 6:
        return f"{trainer.global_step} steps, not 6"
    if not torch.isfinite(torch.tensor(RES["zero2_final_loss"])):
        return f"loss {RES['zero2_final_loss']}"
    return spy.error()


def _tensors(x, prefix=""):
    if torch.is_tensor(x):
        yield prefix, x
    elif isinstance(x, dict):
        for k in sorted(x, key=str):
            yield from _tensors(x[k], f"{prefix}/{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _tensors(v, f"{prefix}/{i}")


def check_zero2_resume(ctx) -> str:
    import lightning as L

    from dreamgym_pl.policy.zero import is_zero_optimizer, read_optimizer, save_optimizer
    from dreamgym_pl.stages.resume import restore_optimizer

    tok, work = ctx["tok"], Path(ctx["work"])
    module = rl_module(tok, "grpo", seed=2)
    batches = rl_batches(module, tok, ctx["prompts"], 3, ppo=False)
    first = zero2_trainer(3)
    first.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    opt = first.optimizers[0]
    if not is_zero_optimizer(opt):
        return f"the fit's optimizer is {type(opt).__name__}, not ZeRO's"
    save_optimizer(opt, work, rank=0, main=True)
    saved = read_optimizer(work)
    if not isinstance(saved, list):
        return "the ZeRO optimizer state was not saved per rank"
    want = {k: v.float().cpu() for k, v in _tensors(opt.state_dict()["base_optimizer_state"])}
    weights = {k: v.detach().float().cpu().clone() for k, v in module.model.state_dict().items()}
    second_module = rl_module(tok, "grpo", seed=2)
    second_module.model.load_state_dict(weights, strict=False)
    report: dict = {}

    class Restore(L.Callback):
        def on_train_start(self, trainer, pl_module):
            restore_optimizer(trainer, {"optimizer": saved})
            got = {k: v.float().cpu() for k, v in _tensors(trainer.optimizers[0].state_dict()["base_optimizer_state"])}
            report["same"] = got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
            report["n"] = len(want)

    second = zero2_trainer(2, [Restore()])
    second.fit(second_module, torch.utils.data.DataLoader(batches, batch_size=None))
    if not report.get("same"):
        return f"the restored optimizer state differs from the saved one ({report.get('n')} tensors)"
    return "" if second.global_step == 2 else f"the resumed fit made {second.global_step} steps"


def check_zero2_ppo(ctx) -> str:
    tok = ctx["tok"]
    module = rl_module(tok, "ppo", seed=4)
    batches = rl_batches(module, tok, ctx["prompts"], 3, ppo=True)
    spy = LossDtypes(module)
    trainer = zero2_trainer(3)
    trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    if trainer.global_step != 3:
        return f"{trainer.global_step} steps, not 3"
    RES["ppo_value_head_dtype"] = str(module.value_head.weight.dtype)
    return spy.error()


def check_zero2_offload(ctx) -> str:
    tok = ctx["tok"]
    module = rl_module(tok, "grpo", seed=6)
    batches = rl_batches(module, tok, ctx["prompts"], 2, ppo=False)
    trainer = zero2_trainer(2, offload=True)
    trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    return "" if trainer.global_step == 2 else f"{trainer.global_step} steps, not 2"


CHECKS = {"hf_vs_vllm": (check_hf_vs_vllm, 120), "vllm_weight_sync": (check_vllm_weight_sync, 30),
          "vllm_two_engines": (check_vllm_two_engines, 90), "vllm_lora_sync": (check_vllm_lora_sync, 90),
          "zero2_rl_step": (check_zero2_rl_step, 60), "zero2_resume": (check_zero2_resume, 60),
          "zero2_ppo": (check_zero2_ppo, 45), "zero2_offload": (check_zero2_offload, 90)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/gpu_check.json")
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--only", nargs="*", default=None, help=f"checks to run ({', '.join(CHECKS)})")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("FAIL gpu: no CUDA device visible")
        sys.exit(1)
    RES.update(gpu=torch.cuda.get_device_name(0), torch=torch.__version__)
    prompts, tok = prompts_and_tokenizer(args.prompts)
    ctx = {"prompts": prompts, "tok": tok, "new_tokens": args.new_tokens, "work": tempfile.mkdtemp(prefix="gpu_check_")}
    verdicts: dict = {}
    t_all = time.perf_counter()
    for name, (fn, share) in CHECKS.items():
        if args.only is not None and name not in args.only:
            continue
        t0 = time.perf_counter()
        try:
            err = fn(ctx)
        except Exception as e:  # a crashing check fails with its reason; the others still run
            traceback.print_exc()
            err = f"{type(e).__name__}: {str(e).strip()[:500]}"
        s = time.perf_counter() - t0
        if not err and s > 2 * share:
            err = f"took {s:.0f} s (share {share} s)"
        verdicts[name] = {"status": "FAIL" if err else "PASS", "seconds": round(s, 1), "reason": err}
        print(f"{'FAIL' if err else 'PASS'} {name} ({s:.0f} s){': ' + err if err else ''}", flush=True)
    close_all()
    RES["checks"] = verdicts
    RES["total_s"] = round(time.perf_counter() - t_all, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(RES, indent=1, default=str))
    print("| value | |\n|---|---|")
    for k, v in RES.items():
        if k != "checks":
            print(f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |")
    print(f"{sum(v['status'] == 'PASS' for v in verdicts.values())}/{len(verdicts)} checks passed "
          f"in {RES['total_s']:.0f} s", flush=True)
    sys.exit(0 if all(v["status"] == "PASS" for v in verdicts.values()) else 1)


if __name__ == "__main__":
    main()
