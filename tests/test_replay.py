import os

import numpy as np
import pytest

from dreamgym_pl.core import Observation, Task, Transition
from dreamgym_pl.replay.buffer import ReplayBuffer, transition_key
from dreamgym_pl.replay.embed import HashingEmbedder

WORDS = "red blue green lipstick shoes tea coffee chair desk large small cotton organic vegan sofa cable".split()


def make_transitions(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        w = rng.choice(WORDS, size=6)
        out.append(Transition(task=Task(f"t{i}", " ".join(w[:3])), step=0, state=Observation(" ".join(w[3:])),
                              action=f"click[{w[0]}]", next_state=Observation(f"page {i}"), reward=0.0, done=False))
    return out


def brute_force(emb, items, query, k):
    keys = emb.embed([transition_key(t.task.instruction, t.state.text, t.action) for t in items])
    q = emb.embed([query])[0]
    sims = keys @ q
    return set(np.argsort(-sims)[:k].tolist()), sims


def test_hashing_embedder_normalised_and_deterministic():
    e = HashingEmbedder(64)
    a = e.embed(["red lipstick", "red lipstick", "blue chair"])
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0)
    assert np.allclose(a[0], a[1]) and not np.allclose(a[0], a[2])


def test_topk_matches_brute_force():
    emb = HashingEmbedder(128)
    items = make_transitions(300)
    buf = ReplayBuffer(emb, capacity=512)
    assert buf.add(items, "offline") == 300
    q = transition_key("red lipstick tea", "large cotton sofa", "click[red]")
    got = buf.query([q], k=5)[0]
    exact, sims = brute_force(emb, items, q, 5)
    got_ids = {int(t.task.task_id[1:]) for t in got}
    # ties in cosine can swap members: compare the similarity values
    assert sorted(np.round(sims[list(got_ids)], 5)) == sorted(np.round(sims[list(exact)], 5))


def test_growth_past_capacity_and_dedup():
    buf = ReplayBuffer(HashingEmbedder(32), capacity=10)
    items = make_transitions(50)
    assert buf.add(items[:30]) == 30
    assert buf.add(items) == 20  # 30 duplicates skipped
    assert len(buf) == 50 and buf.index.get_max_elements() >= 50


def test_real_only_filter_and_eviction():
    buf = ReplayBuffer(HashingEmbedder(64), capacity=16, max_size=40)
    real, synth = make_transitions(20, 1), make_transitions(30, 2)
    for t in synth:
        t.task.task_id = "s" + t.task.task_id
    buf.add(real, "offline")
    buf.add(synth, "synthetic")
    assert len(buf) == 40 and buf.count("synthetic") == 20  # 10 oldest synthetic evicted
    res = buf.query([transition_key(real[0].task.instruction, real[0].state.text, real[0].action)], k=30, real_only=True)[0]
    assert len(res) == 20 and all(not t.task.task_id.startswith("s") for t in res)
    res_all = buf.query([transition_key(real[0].task.instruction, real[0].state.text, real[0].action)], k=40, real_only=False)[0]
    assert len(res_all) == 40 and all(t is not None for t in res_all)


def test_query_counts_what_it_returns_by_source():
    """`reads`: every returned row counted under the source it was added with, with and without exclusions."""
    buf = ReplayBuffer(HashingEmbedder(64), capacity=16)
    off, onl, syn = make_transitions(6, 1), make_transitions(4, 2), make_transitions(5, 3)
    for prefix, ts in (("o", onl), ("s", syn)):
        for t in ts:
            t.task.task_id = prefix + t.task.task_id
    buf.add(off, "offline")
    buf.add(onl, "online")
    buf.add(syn, "synthetic")
    key = transition_key(off[0].task.instruction, off[0].state.text, off[0].action)
    reads = {}
    res = buf.query([key, key], k=15, real_only=False, reads=reads)
    assert reads == {"offline": 12, "online": 8, "synthetic": 10} and sum(map(len, res)) == 30
    reads = {}
    res = buf.query([key], k=15, real_only=True, exclude_tasks=[off[0].task.task_id], reads=reads)[0]
    assert reads == {"offline": 5, "online": 4} and len(res) == 9
    assert buf.query([key], k=3) == buf.query([key], k=3, reads={})  # counting changes no answer


def test_online_quota_shows_the_nearest_online_rows_best_first(tmp_path):
    """`online_k`: up to that many of the k are the nearest online rows (exact cosine), the rest the nearest of the
    others, merged best first; the excluded task's online rows are never shown; a saved buffer keeps its online
    rows; without online rows (or online_k 0) the plain top-k."""
    emb = HashingEmbedder(64)
    buf = ReplayBuffer(emb, capacity=16)
    off, onl = make_transitions(40, 1), make_transitions(6, 2)
    for t in onl:
        t.task.task_id = "o" + t.task.task_id
    buf.add(off, "offline")
    key = transition_key(off[0].task.instruction, off[0].state.text, off[0].action)
    assert buf.query([key], k=3, online_k=2) == buf.query([key], k=3)  # no online rows yet
    buf.add(onl, "online")
    keys_on = emb.embed([transition_key(t.task.instruction, t.state.text, t.action) for t in onl])
    q = emb.embed([key])[0]
    on_order = [onl[i] for i in np.argsort(-(keys_on @ q), kind="stable")]
    reads = {}
    res = buf.query([key], k=3, online_k=2, reads=reads)[0]
    assert reads == {"offline": 1, "online": 2} and len(res) == 3
    assert [t for t in res if t.task.task_id.startswith("o")] == on_order[:2]
    assert res[:1] == [off[0]]  # the key's own transition is nearest (distance 0): first
    all_keys = emb.embed([transition_key(t.task.instruction, t.state.text, t.action) for t in res])
    sims = all_keys @ q
    assert list(sims) == sorted(sims, reverse=True)  # best first across both parts
    # the quota never shows the excluded task's online row, and takes no more than k
    ex = on_order[0].task.task_id
    res = buf.query([key], k=3, online_k=5, exclude_tasks=[ex])[0]
    assert len(res) == 3 and all(t.task.task_id.startswith("o") for t in res) and on_order[0] not in res
    buf.save(tmp_path / "replay")
    back = ReplayBuffer.load(tmp_path / "replay", emb)
    assert back.online_rows == buf.online_rows == list(range(40, 46))
    assert back.query([key], k=3, online_k=2) == buf.query([key], k=3, online_k=2)


def test_save_load_round_trip(tmp_path):
    emb = HashingEmbedder(64)
    buf = ReplayBuffer(emb, capacity=8)
    buf.add(make_transitions(25), "offline")
    buf.save(tmp_path / "replay")
    back = ReplayBuffer.load(tmp_path / "replay", emb)
    assert len(back) == 25 and back.items == buf.items and back.sources == buf.sources
    q = [transition_key("red tea", "sofa", "click[red]")]
    assert back.query(q, 5) == buf.query(q, 5)
    assert back.add(make_transitions(25)) == 0  # digests restored


def test_interrupted_save_keeps_old_copy(tmp_path, monkeypatch):
    emb = HashingEmbedder(64)
    buf = ReplayBuffer(emb, capacity=8)
    buf.add(make_transitions(10), "offline")
    buf.save(tmp_path / "replay")
    buf.add(make_transitions(20, seed=5), "real")

    def crash(*a, **k):
        raise KeyboardInterrupt("killed between write and rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        buf.save(tmp_path / "replay")
    monkeypatch.undo()
    back = ReplayBuffer.load(tmp_path / "replay", emb)
    assert len(back) == 10
    buf.save(tmp_path / "replay")  # a later save recovers
    assert len(ReplayBuffer.load(tmp_path / "replay", emb)) == len(buf)


def test_load_dim_mismatch(tmp_path):
    buf = ReplayBuffer(HashingEmbedder(64), capacity=8)
    buf.add(make_transitions(3))
    buf.save(tmp_path / "r")
    with pytest.raises(ValueError, match="dim"):
        ReplayBuffer.load(tmp_path / "r", HashingEmbedder(32))


def test_minilm_embedder_offline():
    from dreamgym_pl.replay.embed import MiniLMEmbedder

    e = MiniLMEmbedder()
    v = e.embed(["buy red lipstick", "purchase a red lipstick", "office chair with wheels"])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2]


def test_demos_show_synthetic_transitions_only_when_asked():
    from dreamgym_pl.experience.format import ExperienceFormat
    from dreamgym_pl.experience.module import demos_for

    buf = ReplayBuffer(HashingEmbedder(64), capacity=16)
    real, synth = make_transitions(5, 1), make_transitions(5, 3)
    for t in synth:
        t.task.task_id = "s" + t.task.task_id
    buf.add(real, "offline")
    buf.add(synth, "synthetic")
    probe = make_transitions(1, 3)[0]  # the same text as synth[0], another task
    probe.task.task_id = "probe"
    for exclude in ("task", "none", "episode"):
        off = demos_for(buf, probe, ExperienceFormat(k=10, exclude=exclude))
        on = demos_for(buf, probe, ExperienceFormat(k=10, exclude=exclude, synthetic_demos=True))
        assert len(off) == 5 and not any(t.task.task_id.startswith("s") for t in off)
        assert len(on) == 10 and on[0].task.task_id == "st0"  # the identical synthetic step ranks first


@pytest.mark.parametrize("real_only", [True, False])
def test_query_equals_the_listing_reference(tmp_path, real_only):
    """`query` keeps counters instead of listing the allowed rows each call: the same neighbours as the listing
    reference, with synthetic entries, evictions, task exclusions (some tasks wholly synthetic) and after a reload."""
    from dreamgym_pl.replay.buffer import reference_query

    emb = HashingEmbedder(64)
    buf = ReplayBuffer(emb, capacity=32, max_size=120)
    real, synth = make_transitions(80, 3), make_transitions(70, 4)
    for i, t in enumerate(real):
        t.task.task_id = f"r{i % 9}"
    for i, t in enumerate(synth):
        t.task.task_id = f"r{i % 5}" if i % 2 else f"s{i % 4}"
    buf.add(real[:40], "offline")
    buf.add(synth, "synthetic")
    buf.add(real[40:], "online")
    assert buf.deleted and buf.count("synthetic") == 40  # 30 oldest synthetic evicted
    keys = [transition_key(t.task.instruction, t.state.text, t.action) for t in real[::7] + synth[::9]]
    excl = [f"r{i % 9}" if i % 3 else (f"s{i % 4}" if i % 2 else None) for i in range(len(keys))]
    buf.save(tmp_path / "replay")
    for b in (buf, ReplayBuffer.load(tmp_path / "replay", emb)):
        for k in (1, 5, 200):
            want = reference_query(b, keys, k, real_only=real_only)
            assert b.query(keys, k, real_only=real_only) == want
            assert b.query(keys, k, real_only=real_only, exclude_tasks=excl) == \
                reference_query(b, keys, k, real_only=real_only, exclude_tasks=excl)
        assert len(want[0]) == (80 if real_only else 120)  # k=200: every allowed row


def test_query_of_a_buffer_without_allowed_rows():
    from dreamgym_pl.replay.buffer import reference_query

    buf = ReplayBuffer(HashingEmbedder(32), capacity=8)
    buf.add(make_transitions(5), "synthetic")
    key = [transition_key("red tea", "sofa", "click[red]")]
    assert buf.query(key, 3) == reference_query(buf, key, 3) == [[]]
    assert len(buf.query(key, 3, real_only=False)[0]) == 3
