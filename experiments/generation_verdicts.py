"""Why the curriculum's generated tasks were rejected: a tally of the verdicts of the generations shown in runs'
TensorBoard text `curriculum/generation_examples` (synthetic RL logs up to 8 seed -> generated examples an
iteration, each with its verdict: accepted, an existing instruction, or the env's reason, e.g. "not a <type>").

    python experiments/generation_verdicts.py RUN_DIR [RUN_DIR ...] [--examples 2]

The verdict's variable part (the product type, the words quoted) is cut so that kinds of reasons count together.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

EXAMPLE = re.compile(r"^\*\*(?P<verdict>.+?)\*\*: `(?P<seed>.*?)` -> `(?P<gen>.*)`$", re.DOTALL)


def verdict_kind(verdict: str) -> str:
    """A verdict without its variable part (quoted words, the product type): 'rejected: not a <type>: ...'."""
    v = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", verdict)
    v = re.sub(r"not a [^:]*:", "not a <type>:", v)
    v = re.sub(r" for [^:]*$", " for <type>", v)
    v = re.sub(r"no .* of the catalogue", "no <type> of the catalogue", v)
    v = re.sub(r"is not one of a .*'s$", "is not one of a <type>'s", v)
    return v


def parse_examples(text: str) -> list[tuple[str, str, str]]:
    """(seed, generated, verdict) of each paragraph of a `curriculum/generation_examples` text."""
    out = []
    for para in re.split(r"\n\n(?=\*\*)", text):  # a generation's own text may hold blank lines
        m = EXAMPLE.match(para.strip())
        if m:
            out.append((m.group("seed"), m.group("gen"), m.group("verdict")))
    return out


def run_texts(run_dir: Path, tag: str = "curriculum/generation_examples") -> list[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    texts = []
    for f in sorted(run_dir.glob("tb/**/events.out.tfevents*")):
        ea = EventAccumulator(str(f), size_guidance={"tensors": 0})
        ea.Reload()
        for t in ea.Tags().get("tensors", []):
            if t.startswith(tag):
                texts += [e.tensor_proto.string_val[0].decode() for e in ea.Tensors(t)]
    return texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--examples", type=int, default=2, help="examples printed per kind of verdict")
    args = ap.parse_args()
    kinds: Counter[str] = Counter()
    shown: dict[str, list[tuple[str, str, str]]] = {}
    for d in args.runs:
        for text in run_texts(d):
            for seed, gen, v in parse_examples(text):
                k = verdict_kind(v)
                kinds[k] += 1
                shown.setdefault(k, [])
                if len(shown[k]) < args.examples:
                    shown[k].append((seed, gen, v))
    total = sum(kinds.values())
    if not total:
        sys.exit("no curriculum/generation_examples text in these runs (synthetic RL with curriculum.lambda_ > 0 logs it)")
    print(f"{total} generations shown in {len(args.runs)} run(s)")
    for k, n in kinds.most_common():
        print(f"{n:5d} {n / total:6.1%}  {k}")
        for seed, gen, v in shown[k]:
            print(f"          {seed}\n       -> {gen}\n          ({v})")


if __name__ == "__main__":
    main()
