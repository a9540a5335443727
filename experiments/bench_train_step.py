"""Training-step cost of the embedded default's Llama on right-padded batches (`collate`'s padding): the attention
mask given to the model (the reference, as before) against `causal_attention_mask` (no mask for a right-padded
batch, so SDPA runs its causal kernel), both measured in this run on the same batches; the real tokens' losses are
checked equal (tests/test_attention_mask.py checks the logits).

Batches: `--batch` samples whose lengths are uniform in [`--min-len`, `--max-len`] tokens (the experience stage's
prompts are up to 768 + 256 tokens, the policy's up to ~400), random token ids of a `--vocab`-word vocabulary, a
model of `model=tiny`'s size unless told otherwise. Each variant runs `--steps` forward+backward passes after one
warm-up pass; medians are printed and the ratio reference / new.

    python experiments/bench_train_step.py [--batch 16] [--min-len 200] [--max-len 1000] [--steps 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from dreamgym_pl.experience.train_steps import logits_target_loss  # noqa: E402
from dreamgym_pl.policy.samples import StepSample, causal_attention_mask, collate  # noqa: E402


def step_seconds(model, batch, mask) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = model(input_ids=batch["input_ids"], attention_mask=mask, use_cache=False)
    loss = logits_target_loss(out.logits, batch)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, float(loss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--min-len", type=int, default=200)
    ap.add_argument("--max-len", type=int, default=1000)
    ap.add_argument("--target-len", type=int, default=120, help="response tokens at the end of each sample")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--vocab", type=int, default=400)
    ap.add_argument("--hidden-size", type=int, default=128)
    ap.add_argument("--num-layers", type=int, default=4)
    ap.add_argument("--num-heads", type=int, default=4)
    ap.add_argument("--intermediate-size", type=int, default=320)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden_size,
                                         intermediate_size=args.intermediate_size, num_hidden_layers=args.num_layers,
                                         num_attention_heads=args.num_heads, num_key_value_heads=args.num_heads,
                                         max_position_embeddings=max(1024, args.max_len), pad_token_id=0)).train()
    g = torch.Generator().manual_seed(args.seed)
    batches = []
    for _ in range(args.steps + 1):
        lens = torch.randint(args.min_len, args.max_len + 1, (args.batch,), generator=g).tolist()
        samples = []
        for n in lens:
            ids = torch.randint(4, args.vocab, (n,), generator=g).tolist()
            cut = max(1, n - args.target_len)
            samples.append(StepSample(ids[:cut], ids[cut:]))
        batches.append(collate(samples, 0))
    rows = {}
    for name, mask_of in (("attention mask (reference)", lambda b: b["attention_mask"]),
                          ("causal_attention_mask", lambda b: causal_attention_mask(b["attention_mask"]))):
        step_seconds(model, batches[0], mask_of(batches[0]))  # warm-up
        runs = [step_seconds(model, b, mask_of(b)) for b in batches[1:]]
        rows[name] = (statistics.median(t for t, _ in runs), [l for _, l in runs])
        print(f"{name:28s} median {rows[name][0]:.3f} s/step over {args.steps} steps "
              f"(batch {args.batch}, {args.min_len}-{args.max_len} tokens, {torch.get_num_threads()} threads)")
    (ref_t, ref_l), (new_t, new_l) = rows.values()
    assert all(abs(a - b) < 1e-4 for a, b in zip(ref_l, new_l)), "the two variants' losses differ"
    print(f"ratio reference / causal_attention_mask: {ref_t / new_t:.2f}x (losses equal)")


if __name__ == "__main__":
    main()
