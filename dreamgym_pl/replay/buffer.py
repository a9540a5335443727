"""ReplayBuffer: transitions plus an hnswlib cosine index over the embedding of (task, state, action).

- `add(transitions, source)`: online enrichment with a source tag (offline: the scripted agents' and the SFT
  policy's data; online: real transitions of the RL stages and of the experience model's refresh; synthetic); exact
  duplicates (same task, state, action and next state) are skipped; the index grows past its capacity.
- `max_size`: when set, the oldest synthetic entries are evicted first (marked deleted in the index).
- `query(keys, k, real_only)`: top-k by cosine; `real_only` filters out synthetic entries; `online_k` of the k are
  the nearest online entries (when any is allowed), found exactly (few rows: a dot product each).
- `save(dir)` / `load(dir)`: each save writes a new version folder and then atomically swaps the
  `CURRENT` pointer file (`os.replace`), so a crash mid-save leaves the previous copy loadable.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import hnswlib
import numpy as np

from dreamgym_pl.core import Transition, from_dict, iter_jsonl, to_dict, write_jsonl
from dreamgym_pl.replay.embed import Embedder
from dreamgym_pl.run import CorruptFileError, VersionedDir, read_json, reading


def transition_key(task_instruction: str, state_text: str, action: str) -> str:
    """The text that is embedded for retrieval: phi(task, s_t, a_t)."""
    return f"task: {task_instruction} | state: {state_text} | action: {action}"


def _digest(t: Transition) -> str:
    s = "\x1f".join([t.task.instruction, t.state.text, t.action, t.next_state.text, f"{t.reward:.6f}", str(t.done)])
    return hashlib.sha1(s.encode()).hexdigest()


class ReplayBuffer:
    def __init__(self, embedder: Embedder, capacity: int = 10000, max_size: int | None = None, M: int = 16,
                 ef_construction: int = 200, ef_search: int = 64):
        if capacity <= 0:
            raise ValueError("replay.capacity: must be > 0")
        self.embedder = embedder
        self.M, self.ef_construction, self.ef_search = M, ef_construction, ef_search
        self.max_size = max_size
        self.index = hnswlib.Index(space="cosine", dim=embedder.dim)
        self.index.init_index(max_elements=capacity, ef_construction=ef_construction, M=M)
        self.index.set_ef(ef_search)
        self.items: list[Transition | None] = []
        self.sources: list[str] = []
        self.digests: set[str] = set()
        self.deleted: set[int] = set()
        self.synthetic_rows: set[int] = set()  # live synthetic rows: what `real_only` leaves out, kept as rows change
        self.online_rows: list[int] = []  # online rows in the order added (never evicted): `query`'s online_k
        self.task_rows: dict[str, set[int]] = {}  # task id -> its rows (leakage-free retrieval)

    def __len__(self) -> int:
        return len(self.items) - len(self.deleted)

    def count(self, source: str | None = None) -> int:
        return sum(1 for i, s in enumerate(self.sources) if i not in self.deleted and (source is None or s == source))

    def add(self, transitions: Sequence[Transition], source: str = "real") -> int:
        """Add transitions (skipping duplicates); returns how many were added."""
        new = []
        for t in transitions:
            d = _digest(t)
            if d in self.digests:
                continue
            self.digests.add(d)
            new.append(t)
        if not new:
            return 0
        vecs = self.embedder.embed([transition_key(t.task.instruction, t.state.text, t.action) for t in new])
        start = len(self.items)
        need = start + len(new)
        if need > self.index.get_max_elements():
            self.index.resize_index(max(need, 2 * self.index.get_max_elements()))
        self.index.add_items(vecs, np.arange(start, need), num_threads=1)  # one thread: the same graph every run
        self.items.extend(new)
        self.sources.extend([source] * len(new))
        for i, t in enumerate(new, start):
            self.task_rows.setdefault(t.task.task_id, set()).add(i)
        if source == "synthetic":
            self.synthetic_rows.update(range(start, need))
        if source == "online":
            self.online_rows.extend(range(start, need))
        self._evict()
        return len(new)

    def _evict(self) -> None:
        if self.max_size is None:
            return
        excess = len(self) - self.max_size
        for i, s in enumerate(self.sources):
            if excess <= 0:
                break
            if s == "synthetic" and i not in self.deleted:
                self.index.mark_deleted(i)
                self.deleted.add(i)
                self.synthetic_rows.discard(i)
                t = self.items[i]
                if t is not None:
                    self.digests.discard(_digest(t))
                self.items[i] = None
                excess -= 1

    def query(self, keys: Sequence[str], k: int, real_only: bool = True,
              exclude_tasks: Sequence[str | None] | None = None,
              reads: dict[str, int] | None = None, online_k: int = 0) -> list[list[Transition]]:
        """Top-k neighbours of each key text (best first). `exclude_tasks[i]`: a task id whose transitions are
        never returned for key i (leakage-free retrieval: a task never sees its own transitions). `reads`: the
        returned rows are counted into it by the source they were added with (offline, online, synthetic).
        `online_k`: up to this many of the k are the nearest allowed online rows (the RL stages' and refreshes'
        real transitions, `replay.online_k`), the rest the nearest of the other allowed rows, all best first
        (`_query_online`); 0, or no online row: plain top-k.

        The rows a query may return are described, not listed: live rows, less the live synthetic ones
        (`real_only`), less the excluded task's; their number comes from counters kept by `add` and the
        eviction, so a call costs O(k log N + |excluded task's rows|), not O(N). `reference_query` is the
        listing version it must equal."""
        n_live = len(self)
        blocked = self.synthetic_rows if real_only else set()
        n_allowed = n_live - len(blocked)
        if k <= 0 or n_live == 0 or not keys or n_allowed <= 0:
            return [[] for _ in keys]
        kk = min(k, n_allowed)
        self.index.set_ef(max(self.ef_search, 2 * kk))
        vecs = self.embedder.embed(list(keys))
        deleted = self.deleted
        if online_k > 0 and self.online_rows:
            on = np.asarray(self.online_rows)
            on_vecs = np.asarray(self.index.get_items(self.online_rows), dtype=np.float32)  # once a call; normalised
            return [self._query_online(vec, kk, online_k, exclude_tasks[j] if exclude_tasks is not None else None,
                                       blocked, n_allowed, reads, on, on_vecs) for j, vec in enumerate(vecs)]
        if exclude_tasks is not None:
            out = []
            for vec, ex in zip(vecs, exclude_tasks):
                rows = self.task_rows.get(ex, set()) if ex is not None else set()
                n = min(kk, n_allowed - sum(1 for r in rows if r not in deleted and r not in blocked))
                if n <= 0:
                    out.append([])
                    continue
                labels, _ = self.index.knn_query(
                    vec[None], k=n, num_threads=1,
                    filter=lambda i: i not in deleted and i not in blocked and i not in rows)
                self._count(reads, labels[0])
                out.append([self.items[int(i)] for i in labels[0]])
            return out
        if blocked:
            labels, _ = self.index.knn_query(vecs, k=kk, num_threads=1,
                                             filter=lambda i: i not in deleted and i not in blocked)
        else:
            labels, _ = self.index.knn_query(vecs, k=kk)
        for row in labels:
            self._count(reads, row)
        return [[self.items[int(i)] for i in row] for row in labels]

    def _query_online(self, vec: np.ndarray, kk: int, online_k: int, ex: str | None, blocked: set[int],
                      n_allowed: int, reads: dict[str, int] | None, on: np.ndarray,
                      on_vecs: np.ndarray) -> list[Transition]:
        """One key's `query` with an online quota: the min(online_k, kk) nearest online rows (`on`, their stored
        vectors `on_vecs`) not of task `ex`, by exact cosine (ties: the earlier row), then the nearest other
        allowed rows up to kk, merged by distance."""
        deleted = self.deleted
        rows = self.task_rows.get(ex, set()) if ex is not None else set()
        n_all = min(kk, n_allowed - sum(1 for r in rows if r not in deleted and r not in blocked))
        keep = ~np.isin(on, list(rows)) if rows else np.ones(len(on), dtype=bool)
        n_on = min(online_k, n_all, int(keep.sum()))
        picked: list[tuple[float, int]] = []
        if n_on > 0:
            q = vec / max(float(np.linalg.norm(vec)), 1e-12)
            d = np.where(keep, 1.0 - on_vecs @ q, np.inf)
            picked = [(float(d[i]), int(on[i])) for i in np.argsort(d, kind="stable")[:n_on]]
        if n_all - n_on > 0:
            taken = {r for _, r in picked}
            labels, dists = self.index.knn_query(
                vec[None], k=n_all - n_on, num_threads=1,
                filter=lambda i: i not in deleted and i not in blocked and i not in rows and i not in taken)
            picked += [(float(dd), int(i)) for dd, i in zip(dists[0], labels[0])]
        order = [r for _, r in sorted(picked, key=lambda x: x[0])]
        self._count(reads, order)
        return [self.items[r] for r in order]

    def _count(self, reads: dict[str, int] | None, rows: Sequence[int]) -> None:
        for i in rows if reads is not None else ():
            src = self.sources[int(i)]
            reads[src] = reads.get(src, 0) + 1

    # ----- persistence ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        store = VersionedDir(path)
        vdir = store.new()
        self.index.save_index(str(vdir / "index.bin"))
        rows = [{"source": s, "deleted": i in self.deleted, "t": to_dict(t) if t is not None else None}
                for i, (s, t) in enumerate(zip(self.sources, self.items))]
        write_jsonl(vdir / "entries.jsonl", rows)
        (vdir / "meta.json").write_text(json.dumps({"dim": self.embedder.dim, "max_elements": self.index.get_max_elements(),
                                                    "count": len(self.items), "max_size": self.max_size}))
        store.commit(vdir)

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder, fix: str | None = None) -> "ReplayBuffer":
        """The saved buffer; a damaged file raises CorruptFileError naming it and `fix` (what to do)."""
        store = VersionedDir(path, fix=fix)
        vdir = store.current()
        if vdir is None:
            raise CorruptFileError(f"{path}: no saved replay buffer (CURRENT missing); {store.fix}")
        meta = read_json(vdir / "meta.json", store.fix, keys=("dim", "max_elements"))
        if meta["dim"] != embedder.dim:
            raise ValueError(f"{vdir}: saved with embedding dim {meta['dim']}, embedder has {embedder.dim}")
        buf = cls(embedder, capacity=max(1, meta["max_elements"]), max_size=meta.get("max_size"))
        with reading(vdir / "index.bin", store.fix):
            buf.index.load_index(str(vdir / "index.bin"), max_elements=max(1, meta["max_elements"]))
        buf.index.set_ef(buf.ef_search)
        with reading(vdir / "entries.jsonl", store.fix):
            rows = list(iter_jsonl(vdir / "entries.jsonl"))
        for i, row in enumerate(rows):
            t = from_dict(Transition, row["t"]) if row["t"] is not None else None
            buf.items.append(t)
            buf.sources.append(row["source"])
            if t is not None:
                buf.task_rows.setdefault(t.task.task_id, set()).add(i)
            if row["deleted"]:
                buf.deleted.add(i)
            elif t is not None:
                buf.digests.add(_digest(t))
                if row["source"] == "synthetic":
                    buf.synthetic_rows.add(i)
            if row["source"] == "online" and not row["deleted"]:
                buf.online_rows.append(i)
        return buf


def reference_query(buf: ReplayBuffer, keys: Sequence[str], k: int, real_only: bool = True,
                    exclude_tasks: Sequence[str | None] | None = None) -> list[list[Transition]]:
    """`ReplayBuffer.query` by listing: every call lists the allowed rows (O(N)) and filters on that list. The
    straightforward statement of what `query` returns: the test of equal results and bench_replay.py's cost
    ratio compare against it."""
    if k <= 0 or len(buf) == 0 or not keys:
        return [[] for _ in keys]
    allowed = [i for i, s in enumerate(buf.sources) if i not in buf.deleted and (not real_only or s != "synthetic")]
    if not allowed:
        return [[] for _ in keys]
    kk = min(k, len(allowed))
    buf.index.set_ef(max(buf.ef_search, 2 * kk))
    vecs = buf.embedder.embed(list(keys))
    ok = set(allowed)
    if exclude_tasks is not None:
        out = []
        for vec, ex in zip(vecs, exclude_tasks):
            rows = buf.task_rows.get(ex, set()) if ex is not None else set()
            n = min(kk, len(ok) - len(rows & ok))
            if n <= 0:
                out.append([])
                continue
            labels, _ = buf.index.knn_query(vec[None], k=n, num_threads=1, filter=lambda i: i in ok and i not in rows)
            out.append([buf.items[int(i)] for i in labels[0]])
        return out
    if real_only and len(allowed) < len(buf):
        labels, _ = buf.index.knn_query(vecs, k=kk, num_threads=1, filter=lambda i: i in ok)
    else:
        labels, _ = buf.index.knn_query(vecs, k=kk)
    return [[buf.items[int(i)] for i in row] for row in labels]
