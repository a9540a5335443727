"""Replay retrieval: hnswlib query latency and recall@k against exact (brute-force) cosine search.

Keys are real WebShop (task, state, action) texts from scripted-agent episodes, embedded with the hashing
embedder (or `--embedder minilm`); the buffer is filled to each size by repeating episodes over more goals.

A second table times `ReplayBuffer.query` as the synthetic env calls it (real transitions only, the query's own
task excluded) on a buffer whose last `--synthetic-share` of entries are synthetic, against the listing
reference (`reference_query`: the allowed rows listed on every call), both measured in this run: the ratio is
the cost the counters save (their results are equal: tests/test_replay.py).

    python experiments/bench_replay.py [--sizes 10000 100000] [--k 8] [--queries 500] [--synthetic-share 0.3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dreamgym_pl.agents import make_agent  # noqa: E402
from dreamgym_pl.envs import make_vec_env  # noqa: E402
from dreamgym_pl.replay.buffer import ReplayBuffer, reference_query, transition_key  # noqa: E402
from dreamgym_pl.replay.embed import make_embedder  # noqa: E402
from dreamgym_pl.rollout.collector import run_episodes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--embedder", default="hashing")
    ap.add_argument("--synthetic-share", type=float, default=0.3, help="share of synthetic entries (second table)")
    args = ap.parse_args()
    emb = make_embedder(args.embedder, 256)
    env = make_vec_env("webshop", num_products=5000, goals_per_product=8, num_test=500)
    tasks = env.tasks("train")
    agents = [make_agent(n, seed=i, env=env) for i, n in enumerate(["noisy_oracle", "random"])]
    trans = []
    need = max(args.sizes) + args.queries
    i = 0
    while len(trans) < need:
        batch = tasks[(i * 512) % len(tasks):][:512]
        for a in agents:
            trans += [t for tr in run_episodes(env, batch, a, batch_size=128) for t in tr.transitions]
        i += 1
    rng = np.random.default_rng(0)
    print(f"{len(trans)} real transitions collected; embedder {args.embedder} (dim {emb.dim})")
    print("| entries | build s | hnsw query ms (p50) | exact query ms (p50) | speed-up | recall@%d |" % args.k)
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        buf = ReplayBuffer(emb, capacity=n)
        t0 = time.perf_counter()
        buf.add(trans[:n], source="offline")
        build = time.perf_counter() - t0
        live = [t for t in buf.items if t is not None]
        keys = emb.embed([transition_key(t.task.instruction, t.state.text, t.action) for t in live])
        qs = [trans[j] for j in rng.choice(np.arange(n, len(trans)), size=args.queries, replace=False)]
        qtexts = [transition_key(t.task.instruction, t.state.text, t.action) for t in qs]
        qv = emb.embed(qtexts)
        hn_ms, ex_ms, rec = [], [], []
        for qt, v in zip(qtexts, qv):
            t0 = time.perf_counter()
            labels, _ = buf.index.knn_query(v[None], k=args.k)
            hn_ms.append(1000 * (time.perf_counter() - t0))
            t0 = time.perf_counter()
            sims = keys @ v
            top = np.argpartition(-sims, args.k)[: args.k]
            ex_ms.append(1000 * (time.perf_counter() - t0))
            kth = np.sort(sims[top])[0]
            # a hit is any returned neighbour at least as similar as the exact k-th (ties count)
            got = sims[labels[0]]
            rec.append(float(np.mean(got >= kth - 1e-6)))
        h, e = float(np.median(hn_ms)), float(np.median(ex_ms))
        print(f"| {len(live):,} | {build:.1f} | {h:.3f} | {e:.3f} | {e / h:.1f}x | {np.mean(rec):.3f} |")
    print(f"\nquery cost, real transitions only, own task excluded, {args.synthetic_share:.0%} synthetic entries:")
    print("| entries | listing reference ms/query (p50) | query ms/query (p50) | ratio | equal results |")
    print("|---|---|---|---|---|")
    for n in args.sizes:
        size, ref_ms, new_ms, same = query_cost(emb, trans[:n], trans[n:n + args.queries], args.k, args.synthetic_share)
        print(f"| {size:,} | {ref_ms:.3f} | {new_ms:.3f} | {ref_ms / new_ms:.1f}x | {same} |")


def query_cost(emb, entries, queries, k, synthetic_share):
    """Live entries, and p50 milliseconds per single-key query (as `demos_for` asks) of the listing reference
    and of `ReplayBuffer.query` on one buffer (the last `synthetic_share` of `entries` added as synthetic),
    alternating the two per query so that both see the same machine load; and whether every result was equal."""
    buf = ReplayBuffer(emb, capacity=len(entries))
    cut = int(len(entries) * (1 - synthetic_share))
    buf.add(entries[:cut], source="offline")
    buf.add(entries[cut:], source="synthetic")
    ref_ms, new_ms, same = [], [], True
    for q in queries:
        key, ex = [transition_key(q.task.instruction, q.state.text, q.action)], [q.task.task_id]
        t0 = time.perf_counter()
        want = reference_query(buf, key, k, real_only=True, exclude_tasks=ex)
        t1 = time.perf_counter()
        got = buf.query(key, k, real_only=True, exclude_tasks=ex)
        t2 = time.perf_counter()
        ref_ms.append(1000 * (t1 - t0))
        new_ms.append(1000 * (t2 - t1))
        same = same and got == want
    return len(buf), float(np.median(ref_ms)), float(np.median(new_ms)), same


if __name__ == "__main__":
    main()
