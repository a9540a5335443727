"""What a pretrained experience model costs on this machine: SmolLM2-135M-Instruct (`model=smollm2`, or any
`--model` that `load_pretrained` reads) timed for one training step (forward + backward + AdamW) and for batched
generation, each under float32 and under bfloat16 autocast, with full fine-tuning and with LoRA. All variants are
measured in this run, alternating, after one warm-up call each; the first variant is the baseline of the ratios.

Inputs are the experience stage's shapes: `--batch` sequences of `--tokens` tokens for a step (real WebShop text,
not random ids), `--gen-batch` prompts of `--prompt-tokens` tokens with `--new-tokens` sampled tokens (EOS
suppressed, so every variant generates the same number of tokens) for generation.

    python experiments/bench_smol.py [--model smollm2] [--batch 4] [--tokens 512] [--reps 3] [--threads N]

Run it alone (one torch job on the machine): a second job sharing the cores makes the timings meaningless.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def text_ids(tok, n_tokens: int, rows: int, seed: int) -> "list[list[int]]":
    """`rows` windows of `n_tokens` tokens of WebShop pages (the embedded env's product text)."""
    import random

    from dreamgym_pl.envs.webshop.env import WebShopEngine

    eng = WebShopEngine(num_products=300, seed=seed, num_test=100, num_val=50)
    text = " ".join(f"{g.instruction} [button] {p['name']} {p.get('price', '')} " + " ".join(map(str, p.values()))
                    for g, p in zip(eng.tasks("train"), eng.products))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        i = rng.randrange(0, max(1, len(ids) - n_tokens))
        out.append(ids[i:i + n_tokens])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2, a .gguf file or an HF folder")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--gen-batch", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--skip-generation", action="store_true")
    args = ap.parse_args()

    import torch

    from dreamgym_pl.models import add_lora, load_pretrained, num_params

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.time()
    model, tok = load_pretrained(args.model, "float32")
    print(f"loaded {args.model}: {num_params(model) / 1e6:.1f}M params in {time.time() - t0:.1f} s; "
          f"{torch.get_num_threads()} torch threads")
    rows = text_ids(tok, args.tokens, args.batch, 0)
    batch = torch.tensor(rows)
    import copy

    full = model
    lora = add_lora(copy.deepcopy(model), {"r": args.lora_r, "alpha": 2 * args.lora_r, "dropout": 0.0,
                                           "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                              "up_proj", "down_proj"]})
    variants = {}
    for name, m in (("full", full), (f"lora{args.lora_r}", lora)):
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-5)
        for prec in ("fp32", "bf16-autocast"):
            variants[f"train {name} {prec}"] = (m, opt, prec)

    def step(m, opt, prec):
        m.train()
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if prec != "fp32" else nullcontext()
        with ctx:
            loss = m(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times: dict[str, list[float]] = {k: [] for k in variants}
    for k, v in variants.items():  # warm-up
        step(*v)
    for _ in range(args.reps):
        for k, v in variants.items():
            t = time.perf_counter()
            step(*v)
            times[k].append(time.perf_counter() - t)
    base = statistics.median(next(iter(times.values())))
    print(f"\ntraining step, {args.batch} x {args.tokens} tokens (median of {args.reps}; ratio vs the first):")
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"  {k:28s} {med:7.2f} s/step  {args.batch * args.tokens / med:7.0f} tokens/s  x{base / med:.2f}")
    if args.skip_generation:
        return

    prompts = text_ids(tok, args.prompt_tokens, args.gen_batch, 1)
    enc = torch.tensor(prompts)
    attn = torch.ones_like(enc)

    def gen(prec):
        full.eval()
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if prec != "fp32" else nullcontext()
        with torch.no_grad(), ctx:
            full.generate(input_ids=enc, attention_mask=attn, max_new_tokens=args.new_tokens,
                          min_new_tokens=args.new_tokens, do_sample=True, temperature=0.7, top_k=0,
                          pad_token_id=tok.pad_token_id)

    gtimes: dict[str, list[float]] = {"fp32": [], "bf16-autocast": []}
    for p in gtimes:
        gen(p)
    for _ in range(args.reps):
        for p in gtimes:
            t = time.perf_counter()
            gen(p)
            gtimes[p].append(time.perf_counter() - t)
    base = statistics.median(gtimes["fp32"])
    print(f"\ngeneration, {args.gen_batch} prompts x {args.prompt_tokens} tokens + {args.new_tokens} new "
          f"(median of {args.reps}):")
    for p, ts in gtimes.items():
        med = statistics.median(ts)
        print(f"  {p:28s} {med:7.2f} s/call  {args.gen_batch * args.new_tokens / med:7.1f} new tokens/s  "
              f"x{base / med:.2f}")


if __name__ == "__main__":
    main()
