"""The run directory's files: atomic JSON writes, JSON reads that name a corrupt file, and versioned folders
committed by one atomic pointer swap (RL checkpoints and the replay buffer share it).

Run directory contract (scripts, sweeps and people read these):
  config.yaml    the resolved config of the latest invocation
  environment.jsonl  one line per invocation: package versions, CPU, threads, commit (`provenance.py`)
  stages.json    completed stages and the current policy / experience checkpoints (resume)
  metrics.json   flat {"key": number}, rewritten atomically after every stage
  offline/       transitions.jsonl from `collect`
  replay/        the replay buffer (a versioned folder)
  curriculum/    the curriculum's state and generated tasks
  checkpoints/   <stage>/ HF-format weights + tokenizer; <stage>/resume/ RL checkpoints (versioned)
  history/       per-iteration logs of RL stages
  tb/            TensorBoard logs, one sub-directory per stage
  plots/         PNG curves
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


class CorruptFileError(RuntimeError):
    """A run-directory file that cannot be read; the message names it and what to do."""


def atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path, fix: str = "delete it, or rerun with resume=false", keys: tuple[str, ...] = ()) -> Any:
    """JSON from a run-directory file; a truncated or garbled file, or one that is not a mapping holding `keys`,
    raises CorruptFileError naming it and `fix`."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptFileError(f"{path}: not valid JSON ({e}); {fix}") from e
    if keys and not (isinstance(data, dict) and all(k in data for k in keys)):
        raise CorruptFileError(f"{path}: not the expected contents (a mapping with {list(keys)}); {fix}")
    return data


@contextmanager
def reading(path: Path, fix: str) -> Iterator[None]:
    """Any failure to read `path` (truncated, garbled, missing) becomes a CorruptFileError naming it and `fix`."""
    try:
        yield
    except CorruptFileError:
        raise
    except FileNotFoundError as e:
        raise CorruptFileError(f"{path}: missing ({e}); {fix}") from e
    except Exception as e:  # noqa: BLE001 - whatever the reader raised, the file is what the user must hear about
        raise CorruptFileError(f"{path}: cannot be read ({type(e).__name__}: {e}); {fix}") from e


MANIFEST = "MANIFEST.json"
HASH_LIMIT = 256 << 20  # files up to this size are hashed in the manifest; larger ones (LLM weights) by size only


def _file_sha1(path: Path) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(vdir: Path) -> None:
    """Size (and sha1 of files up to HASH_LIMIT) of every file of a version folder, before it is committed."""
    files = {}
    for f in sorted(p for p in vdir.rglob("*") if p.is_file() and p.name != MANIFEST):
        size = f.stat().st_size
        files[f.relative_to(vdir).as_posix()] = {"size": size, "sha1": _file_sha1(f) if size <= HASH_LIMIT else None}
    atomic_write_json(vdir / MANIFEST, files)


def verify_manifest(vdir: Path, fix: str) -> None:
    """Every file the manifest lists is there, whole: else CorruptFileError naming the first bad file and `fix`."""
    files = read_json(vdir / MANIFEST, fix)
    for rel, want in sorted(files.items()):
        f = vdir / rel
        if not f.is_file():
            raise CorruptFileError(f"{f}: missing from a committed checkpoint; {fix}")
        if f.stat().st_size != want["size"] or (want["sha1"] and _file_sha1(f) != want["sha1"]):
            raise CorruptFileError(f"{f}: corrupt (its size or checksum differs from {vdir / MANIFEST}); {fix}")


class VersionedDir:
    """A folder of versions `<prefix>-NNNNNN/` and a `CURRENT` pointer file naming the live one.

    `new(version)` makes an empty version folder; `commit(vdir)` writes its manifest (sizes and checksums),
    swaps the pointer to it atomically (`os.replace`) and then removes every other version: a kill at any
    point leaves the previous version loadable. `current()` is the live folder (None before the first commit),
    checked against its manifest: a damaged file raises CorruptFileError saying `fix`."""

    def __init__(self, root: str | Path, prefix: str = "v", fix: str | None = None):
        self.root = Path(root)
        self.prefix = prefix
        self.fix = fix or f"delete {self.root} (its saves are lost) or rerun with resume=false"

    @property
    def pointer(self) -> Path:
        return self.root / "CURRENT"

    def current(self) -> Path | None:
        if not self.pointer.exists():
            return None
        with reading(self.pointer, self.fix):
            name = self.pointer.read_text(encoding="utf-8").strip()
        vdir = self.root / name
        if not name.startswith(f"{self.prefix}-") or not vdir.is_dir():
            raise CorruptFileError(f"{self.pointer}: points to {name!r}, which is not a saved version; {self.fix}")
        if (vdir / MANIFEST).exists():
            verify_manifest(vdir, self.fix)
        elif not any(vdir.iterdir()):  # (a version without a manifest predates them and is loaded unchecked)
            raise CorruptFileError(f"{vdir}: an empty saved version; {self.fix}")
        return vdir

    def next_version(self) -> int:
        cur = self.current()
        return 0 if cur is None else int(cur.name.split("-")[1]) + 1

    def new(self, version: int | None = None) -> Path:
        vdir = self.root / f"{self.prefix}-{self.next_version() if version is None else version:06d}"
        if vdir.exists():
            shutil.rmtree(vdir)
        vdir.mkdir(parents=True)
        return vdir

    def commit(self, vdir: Path) -> None:
        write_manifest(vdir)
        tmp = self.root / "CURRENT.tmp"
        tmp.write_text(vdir.name)
        os.replace(tmp, self.pointer)  # the commit point
        for d in self.root.glob(f"{self.prefix}-*"):
            if d.name != vdir.name:
                shutil.rmtree(d, ignore_errors=True)
