"""Rollout and training throughput of the framework against bare PyTorch/HF baselines, in one run.

1. generation: the collector (PolicyActor + HFEngine + env, multi-turn) vs a bare batched `model.generate`
   on the same model, batch and prompts (tokens generated per second);
2. training: PolicyModule (GRPO loss, Lightning Trainer) vs a bare forward/backward/AdamW loop on the same
   per-step samples (tokens per second).

    python experiments/bench_rollout.py [--episodes 64] [--batch 32] [--train-steps 20]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from dreamgym_pl.agents import make_agent  # noqa: E402
from dreamgym_pl.envs import make_vec_env  # noqa: E402
from dreamgym_pl.models import build_tiny_llama, num_params, train_word_tokenizer  # noqa: E402
from dreamgym_pl.policy import losses  # noqa: E402
from dreamgym_pl.policy.algos import GRPO, GRPOConfig  # noqa: E402
from dreamgym_pl.policy.module import PolicyModule  # noqa: E402
from dreamgym_pl.policy.samples import collate, trajectory_samples  # noqa: E402
from dreamgym_pl.rollout.actor import PolicyActor  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402
from dreamgym_pl.rollout.engine import HFEngine  # noqa: E402
from dreamgym_pl.rollout.sampling import SamplingParams  # noqa: E402
from dreamgym_pl.rollout.prompts import PromptConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=12)
    ap.add_argument("--train-steps", type=int, default=20)
    args = ap.parse_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    torch.manual_seed(0)
    env = make_vec_env("webshop", show_instruction=False, results_per_page=3, max_steps=10)
    tasks = env.tasks("train")[: args.episodes]
    demo = run_episodes(env, tasks, make_agent("noisy_oracle", env=env), batch_size=64)
    corpus = [t.instruction for t in env.tasks("all")] + [s.state.text + " " + s.action for d in demo for s in d.transitions]
    tok = train_word_tokenizer(corpus)
    model = build_tiny_llama(tok)
    pcfg = PromptConfig()
    print(f"model: {num_params(model) / 1e6:.2f}M parameters, vocab {len(tok)}, torch threads {torch.get_num_threads()}")

    # 1. generation --------------------------------------------------------------------------------
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    engine = HFEngine(model, tok, micro_batch=args.batch)
    calls: list[list[str]] = []  # the exact prompt batches the collector generated for
    inner = engine.generate
    engine.generate = lambda prompts, p: (calls.append(list(prompts)), inner(prompts, p))[1]  # type: ignore[method-assign]
    t0 = time.perf_counter()
    run_episodes(env, tasks, PolicyActor(engine, pcfg, params, env.normalize_action), batch_size=args.batch)
    coll_s = time.perf_counter() - t0
    coll_tps = engine.generated_tokens / coll_s
    # the bare baseline replays the same prompt batches through model.generate (no env, no parsing), and
    # counts generated tokens the same way (up to and including EOS)
    tok.padding_side = "left"
    gen_tokens, t0 = 0, time.perf_counter()
    with torch.no_grad():
        for batch in calls:
            for j in range(0, len(batch), args.batch):
                enc = tok(batch[j:j + args.batch], return_tensors="pt", padding=True, add_special_tokens=False)
                out = model.generate(**enc, max_new_tokens=args.new_tokens, do_sample=True, top_k=0,
                                     pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
                gen = out[:, enc["input_ids"].shape[1]:]
                for row in gen.tolist():
                    n = len(row)
                    if tok.eos_token_id in row:
                        n = row.index(tok.eos_token_id) + 1
                    gen_tokens += n
    bare_tps = gen_tokens / (time.perf_counter() - t0)

    # 2. training ----------------------------------------------------------------------------------
    samples = [s for i, d in enumerate(demo) for s in trajectory_samples(d, tok, pcfg, traj_index=i)]
    for s in samples:
        s.scalars = {"adv": 1.0}
    batches = [collate(samples[i:i + 64], tok.pad_token_id) for i in range(0, len(samples), 64)]
    batches = (batches * (args.train_steps // len(batches) + 1))[: args.train_steps]
    bare_model = build_tiny_llama(tok)
    opt = torch.optim.AdamW(bare_model.parameters(), lr=1e-4)
    n_tok, t0 = 0, time.perf_counter()
    for b in batches:
        out = bare_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        loss = -losses.masked_mean(losses.token_logprobs(out.logits, b["input_ids"]), b["loss_mask"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        n_tok += int(b["attention_mask"].sum())
    bare_train = n_tok / (time.perf_counter() - t0)

    import lightning as L

    module = PolicyModule(build_tiny_llama(tok), tok, GRPO(GRPOConfig(kl_coef=0.0, entropy_coef=0.0)), lr=1e-4)
    for b in batches:
        b["old_logp"] = module.logprobs(b)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    t0 = time.perf_counter()
    trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    mod_train = n_tok / (time.perf_counter() - t0)

    print("| measure | framework | bare baseline | ratio |")
    print("|---|---|---|---|")
    print(f"| generation tokens/s (collector vs model.generate, batch {args.batch}) | {coll_tps:,.0f} | {bare_tps:,.0f} | "
          f"{coll_tps / bare_tps:.2f} |")
    print(f"| training tokens/s (PolicyModule GRPO vs bare fwd/bwd/AdamW) | {mod_train:,.0f} | {bare_train:,.0f} | "
          f"{mod_train / bare_train:.2f} |")


if __name__ == "__main__":
    main()
