"""The `hasty` demonstrator's decision, asked of a policy (docs/results/2026-12-03_hasty_demonstrations.md): on an
item page where a wanted option is chosen, another wanted option is still to click and `buy now` is admissible, does
the policy buy now (the demonstrator's habit, 65% of its multi-option episodes) or click the next option? The states
are the oracle's own on the split's goals asking for two or more options (the first such page of each episode, the
prompt as the policy would see it there); per policy it prints the greedy action's kind, the pairwise probability of
buying, p(buy) / (p(buy) + p(next option)) with each action's sequence probability, its spread, and the mean
probability of the continuing action (what a sampled group of RL finds); and, from the run's offline episodes, what
its demonstrations did at the same decision.

    python experiments/diagnostics/webshop_decision_margins.py D1 [D2 ...] [--policy sft] [--split test] [--tasks 500]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dreamgym_pl.core import Observation, Task, Transition, group_trajectories, read_jsonl  # noqa: E402
from dreamgym_pl.envs.webshop.agents import buy_with_a_wanted_option, selected_options  # noqa: E402
from dreamgym_pl.envs.webshop.reward import goal_option_values  # noqa: E402
from dreamgym_pl.policy.samples import encode_prompt  # noqa: E402
from dreamgym_pl.rollout.prompts import PromptConfig, build_prompt, extract_action  # noqa: E402

BUY = "click[buy now]"


class DecisionRecorder:
    """An actor that plays `inner` (the oracle) and records, once an episode, the prompt at the hasty decision:
    `buy now` admissible, a wanted option chosen, and the oracle's action another click that is not `buy now`."""

    def __init__(self, inner, prompt_cfg: PromptConfig):
        self.inner, self.prompt_cfg = inner, prompt_cfg
        self.records: list[dict] = []

    def begin(self, tasks: Sequence[Task]) -> None:
        self.tasks = list(tasks)
        self.inner.begin(tasks)
        self.history: list[list[tuple[str, str]]] = [[] for _ in self.tasks]
        self.done = [False] * len(self.tasks)

    def act(self, observations: Sequence[Observation | None]) -> list[str | None]:
        actions = self.inner.act(observations)
        for i, (obs, a) in enumerate(zip(observations, actions)):
            if obs is None or a is None:
                continue
            if (not self.done[i] and a != BUY and a.startswith("click[")
                    and buy_with_a_wanted_option(set(goal_option_values(self.tasks[i].goal)), obs)):
                self.records.append({"task_id": self.tasks[i].task_id, "continue": a,
                                     "prompt": build_prompt(self.tasks[i], self.history[i], obs, self.prompt_cfg)})
                self.done[i] = True
            self.history[i].append((obs.text, a))
        return actions


def demo_decisions(trajs: Sequence) -> dict[str, int]:
    """What demonstrations did at the same decision: over trajectories (a run's offline episodes of one agent), the
    first page of each with `buy now` admissible, a wanted option chosen and another wanted one not: `buy` or
    `continue` there; and `final_buys`, purchases on pages where every wanted option was chosen (the page a policy
    may pool with the decision)."""
    out = {"buy": 0, "continue": 0, "final_buys": 0}
    for t in trajs:
        wanted, decided = set(goal_option_values(t.task.goal)), False
        for tr in t.transitions:
            if not buy_with_a_wanted_option(wanted, tr.state):
                continue
            chosen = selected_options(tr.state.text)
            if not decided and len(wanted) >= 2 and not wanted <= chosen:
                out["buy" if tr.action == BUY else "continue"] += 1
                decided = True
            elif wanted <= chosen and tr.action == BUY:
                out["final_buys"] += 1
    return out


def action_kind(action: str, cont: str) -> str:
    """'buy' (the hasty habit), 'continue' (the oracle's next click), or 'other'."""
    a = " ".join(action.split())
    return "buy" if a == BUY else "continue" if a == " ".join(cont.split()) else "other"


def pair_prob(logp_buy: float, logp_cont: float) -> float:
    """p(buy) / (p(buy) + p(continue)) from the two sequence log-probabilities (stable)."""
    m = max(logp_buy, logp_cont)
    b, c = math.exp(logp_buy - m), math.exp(logp_cont - m)
    return b / (b + c)


def summary(rows: Sequence[dict]) -> dict[str, float]:
    """rows: {kind, p_buy_pair, logp_cont}; the shares of greedy kinds, the mean and quartiles of the pairwise
    buy probability, the share of decisions within 0.3-0.7 of it (a near tie), and the mean p(continue)."""
    n = len(rows)
    if n == 0:
        raise ValueError("no decision recorded: no goal of the split asks for two or more options the oracle clicks")
    ps = sorted(r["p_buy_pair"] for r in rows)
    q = lambda f: ps[min(n - 1, int(f * n))]  # noqa: E731
    return {"decisions": n,
            **{f"greedy_{k}": sum(r["kind"] == k for r in rows) / n for k in ("buy", "continue", "other")},
            "p_buy_pair_mean": sum(ps) / n, "p_buy_pair_q25": q(0.25), "p_buy_pair_median": q(0.5),
            "p_buy_pair_q75": q(0.75), "near_tie_share": sum(0.3 <= p <= 0.7 for p in ps) / n,
            "p_continue_mean": sum(math.exp(r["logp_cont"]) for r in rows) / n}


@torch.no_grad()
def sequence_logp(model, tok, prompt: str, action: str, max_tokens: int) -> float:
    """log p(action | prompt): the action's tokens without the end-of-sequence one (generation stops at the
    action's stop string, and RL's samples end there too), logits at position i scoring token i + 1."""
    p, a = encode_prompt(tok, prompt, max_tokens), tok(action, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p + a])
    logits = model(input_ids=ids).logits[0, len(p) - 1:-1].float()
    return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(a)[:, None]).sum())


def main() -> None:
    from dreamgym_pl.models import load_pretrained
    from dreamgym_pl.rollout.actor import policy_actor
    from dreamgym_pl.rollout.collector import run_episodes
    from dreamgym_pl.rollout.engine import HFEngine
    from dreamgym_pl.stages import Run
    from dreamgym_pl.stages.context import run_config
    from dreamgym_pl.stages.policy import algorithm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--policy", default="sft", help="the checkpoint under <run>/checkpoints/")
    ap.add_argument("--split", default="test", choices=["train", "val", "test"])
    ap.add_argument("--tasks", type=int, default=500, help="the split's first N goals (those asking >= 2 options)")
    ap.add_argument("--demos", default="hasty", help="the offline agent whose decisions are counted too")
    args = ap.parse_args()
    for d in args.runs:
        run = Run(run_config(d, []), d)
        tasks = [t for t in run.env.tasks(args.split)[: args.tasks] if len(goal_option_values(t.goal)) >= 2]
        rec = DecisionRecorder(run.env.scripted_agent("oracle", run.cfg.seed), run.prompt_cfg)
        run_episodes(run.env, tasks, rec, batch_size=64)
        model, tok = load_pretrained(d / "checkpoints" / args.policy, run.cfg.model.dtype)
        model.eval()
        algo = algorithm(run)
        engine = HFEngine(model, tok, max_prompt_tokens=run.prompt_cfg.max_tokens, micro_batch=64,
                          cache=run.cfg.engine.get("cache", "filled"))
        actor = policy_actor(engine, run.prompt_cfg, run.env, 0.0, algo.cfg.max_new_tokens)
        greedy = actor.engine.generate([r["prompt"] for r in rec.records], actor.params)
        rows = []
        for r, g in zip(rec.records, greedy):
            lb = sequence_logp(model, tok, r["prompt"], BUY, run.prompt_cfg.max_tokens)
            lc = sequence_logp(model, tok, r["prompt"], r["continue"], run.prompt_cfg.max_tokens)
            act = run.env.normalize_action(extract_action(g.text, actor.params.stop, run.prompt_cfg.think))  # as PolicyActor
            rows.append({"kind": action_kind(act, r["continue"]), "p_buy_pair": pair_prob(lb, lc), "logp_cont": lc})
        s = summary(rows)
        offline = d / "offline" / "transitions.jsonl"
        if offline.exists():  # the run's own demonstrations, at the same decision (train goals)
            demos = [t for t in group_trajectories(read_jsonl(offline, Transition))
                     if t.transitions and t.transitions[0].source == args.demos]
            c = demo_decisions(demos)
            print(f"{d}: {len(demos)} {args.demos} demonstrations buy at the decision {c['buy']} times, continue "
                  f"{c['continue']} ({c['buy'] / max(1, c['buy'] + c['continue']):.3f} buy); {c['final_buys']} purchases "
                  f"with every wanted option chosen")
        print(f"{d} ({args.policy}, {len(tasks)} {args.split} goals asking >= 2 options): "
              + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()))


if __name__ == "__main__":
    main()
