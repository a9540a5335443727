"""Optuna sweeps over the pipeline, driven directly (the Hydra Optuna sweeper plugin pins optuna < 3).

A sweep spec (YAML, see sweeps/*.yaml) names the search space over config keys, the objective metric (a key
of the run's metrics.json measured on the validation split, e.g. `synthetic_rl/val_success_rate`: a test
metric is refused, test is reported only), the sampler and the pruner. Each trial composes the Hydra config with the spec's
overrides plus its sampled parameters and runs the pipeline in-process in its own directory
`<out>/trial_NNNN`, so `tensorboard --logdir <out>` compares trials side by side. The study lives in SQLite:
stopping a sweep and running the same command again continues it up to `n_trials` finished (complete or
pruned) trials.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import lightning as L
import optuna
import yaml
from optuna.trial import TrialState

log = logging.getLogger("dreamgym_pl.sweep")

PARAM_TYPES = ("float", "int", "categorical")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)  # failed trials (crash, kill) do not count towards n_trials


class SweepSpecError(ValueError):
    """A malformed sweep spec; the message names the file and the key."""


@dataclass
class SweepSpec:
    study_name: str
    params: dict[str, dict[str, Any]]
    metric: str = "eval/val_success_rate"
    direction: str = "maximize"
    n_trials: int = 10
    overrides: list[str] = field(default_factory=list)
    start_from: str | None = None
    sampler: dict[str, Any] = field(default_factory=lambda: {"name": "tpe", "seed": 0})
    pruner: dict[str, Any] = field(default_factory=lambda: {"name": "median"})
    prune_on: str = "rollout/success_rate"


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a sweep spec; every error names the file and the offending key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SweepSpecError(f"{path}: cannot read sweep spec: {e}") from e
    if not isinstance(raw, dict):
        raise SweepSpecError(f"{path}: a sweep spec is a mapping")
    known = set(SweepSpec.__dataclass_fields__)
    for k in raw:
        if k not in known:
            raise SweepSpecError(f"{path}: unknown key {k!r}; known: {sorted(known)}")
    for k in ("study_name", "params"):
        if k not in raw:
            raise SweepSpecError(f"{path}: missing key {k!r}")
    if not isinstance(raw["params"], dict) or not raw["params"]:
        raise SweepSpecError(f"{path}: params: needs at least one config key to search")
    for name, p in raw["params"].items():
        check_param(f"{path}: params.{name}", p)
    spec = SweepSpec(**raw)
    if spec.direction not in ("maximize", "minimize"):
        raise SweepSpecError(f"{path}: direction: must be maximize or minimize, got {spec.direction!r}")
    if not isinstance(spec.n_trials, int) or spec.n_trials < 1:
        raise SweepSpecError(f"{path}: n_trials: must be an integer >= 1, got {spec.n_trials!r}")
    for key in ("metric", "prune_on"):
        if is_test_metric(getattr(spec, key)):
            raise SweepSpecError(f"{path}: {key}: {getattr(spec, key)!r} is measured on the test split; sweeps tune on "
                                 f"the validation split (e.g. synthetic_rl/val_success_rate): test is reported only")
    make_sampler(spec.sampler, f"{path}: sampler")
    make_pruner(spec.pruner, f"{path}: pruner")
    return spec


def is_test_metric(key: str) -> bool:
    """`<stage>/test_*`, `test/*` (the RL curves) and `eval/*` other than `eval/val_*` (eval.split: test)."""
    head, _, tail = str(key).partition("/")
    return head == "test" or tail.startswith("test_") or (head == "eval" and not tail.startswith("val_"))


def check_param(where: str, p: Any) -> None:
    if not isinstance(p, dict) or p.get("type") not in PARAM_TYPES:
        raise SweepSpecError(f"{where}: needs type one of {list(PARAM_TYPES)}")
    if p["type"] == "categorical":
        if not isinstance(p.get("choices"), list) or not p["choices"]:
            raise SweepSpecError(f"{where}: categorical needs a non-empty list `choices`")
        return
    for k in ("low", "high"):
        if not isinstance(p.get(k), (int, float)):
            raise SweepSpecError(f"{where}: {p['type']} needs a number `{k}`")
    if p["low"] > p["high"]:
        raise SweepSpecError(f"{where}: low {p['low']} > high {p['high']}")
    if p.get("log") and p["low"] <= 0:
        raise SweepSpecError(f"{where}: log scale needs low > 0")


def suggest(trial: optuna.Trial, params: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Sample one value per config key from its declared distribution."""
    out: dict[str, Any] = {}
    for name, p in params.items():
        if p["type"] == "float":
            out[name] = trial.suggest_float(name, float(p["low"]), float(p["high"]), log=bool(p.get("log")),
                                            step=p.get("step"))
        elif p["type"] == "int":
            out[name] = trial.suggest_int(name, int(p["low"]), int(p["high"]), log=bool(p.get("log")),
                                          step=int(p.get("step", 1)))
        else:
            out[name] = trial.suggest_categorical(name, p["choices"])
    return out


def to_overrides(params: dict[str, Any]) -> list[str]:
    """Hydra override strings for sampled values (floats written in full precision)."""
    return [f"{k}={json.dumps(v) if isinstance(v, str) else repr(v)}" for k, v in params.items()]


def _build(kinds: dict[str, Any], cfg: dict[str, Any], default: str, where: str, what: str) -> Any:
    cfg = dict(cfg)
    name = cfg.pop("name", default)
    if name not in kinds:
        raise SweepSpecError(f"{where}.name: unknown {what} {name!r}; known: {sorted(kinds)}")
    try:
        return kinds[name](**cfg)
    except TypeError as e:
        raise SweepSpecError(f"{where}: {e}") from e


def make_sampler(cfg: dict[str, Any], where: str = "sampler") -> optuna.samplers.BaseSampler:
    kinds = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler,
             "cmaes": optuna.samplers.CmaEsSampler, "qmc": optuna.samplers.QMCSampler}
    return _build(kinds, cfg or {}, "tpe", where, "sampler")


def make_pruner(cfg: dict[str, Any] | None, where: str = "pruner") -> optuna.pruners.BasePruner:
    kinds = {"median": optuna.pruners.MedianPruner, "percentile": optuna.pruners.PercentilePruner,
             "hyperband": optuna.pruners.HyperbandPruner, "none": optuna.pruners.NopPruner}
    return _build(kinds, cfg or {"name": "none"}, "median", where, "pruner")


class PruningCallback(L.Callback):
    """Reports `monitor` (logged once per RL iteration) to the trial and prunes when Optuna says so.
    Steps count RL iterations across all the stages of the trial."""

    def __init__(self, trial: optuna.Trial, monitor: str = "rollout/success_rate"):
        self.trial, self.monitor = trial, monitor
        self.step = 0
        self._last_iter: tuple[int, float] | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        m = trainer.callback_metrics
        if self.monitor not in m or "rollout/iteration" not in m:
            return
        key = (id(trainer), float(m["rollout/iteration"]))
        if key == self._last_iter:
            return
        self._last_iter = key
        self.trial.report(float(m[self.monitor]), self.step)
        self.step += 1
        if self.trial.should_prune():
            raise optuna.TrialPruned(f"{self.monitor}={float(m[self.monitor]):.3f} at iteration {self.step}")


def fail_stale(study: optuna.Study) -> int:
    """Trials left RUNNING by a killed sweep are marked FAIL (one sweep process per study)."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, "error", "sweep killed while the trial ran")
        study._storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
        n += 1
    return n


def write_hparams(tb_dir: Path, params: dict[str, Any], metrics: dict[str, float]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tb_dir))
    w.add_hparams({k: v for k, v in params.items()}, {f"hparam/{k}": v for k, v in metrics.items()}, run_name="hparams")
    w.close()


ComposeFn = Callable[[list[str]], Any]
RunFn = Callable[[Any, Path, list], dict[str, float]]


def make_objective(spec: SweepSpec, out: Path, compose: ComposeFn, run: RunFn, extra: list[str]):
    """The Optuna objective: one pipeline run per trial, in `<out>/trial_NNNN`."""

    def objective(trial: optuna.Trial) -> float:
        params = suggest(trial, spec.params)
        d = out / f"trial_{trial.number:04d}"
        trial.set_user_attr("run_dir", str(d))
        overrides = [*spec.overrides, *extra, *to_overrides(params)]
        if spec.start_from:
            if d.exists():
                shutil.rmtree(d)
            shutil.copytree(spec.start_from, d, ignore=shutil.ignore_patterns("tb"))
            overrides.append("resume=true")
        try:
            cfg = compose(overrides)
            metrics = run(cfg, d, [PruningCallback(trial, spec.prune_on)])
            if spec.metric not in metrics:
                raise KeyError(f"metric {spec.metric!r} not in the run's metrics; have {sorted(metrics)}")
            value = float(metrics[spec.metric])
            if math.isnan(value):
                raise FloatingPointError(f"metric {spec.metric!r} is NaN")
        except optuna.TrialPruned:
            raise
        except Exception as e:
            trial.set_user_attr("error", f"{type(e).__name__}: {e}")
            log.error("trial %d failed: %s: %s", trial.number, type(e).__name__, e)
            raise
        write_hparams(d / "tb", params, {spec.metric: value})
        return value

    return objective


def open_study(spec: SweepSpec, storage: str) -> optuna.Study:
    """Create or load the study. A resumed study's sampler seed is offset by the number of trials it already
    has: reseeding with the same seed would replay the same random samples as the first invocation."""
    study = optuna.create_study(study_name=spec.study_name, storage=storage, direction=spec.direction,
                                sampler=make_sampler(spec.sampler), pruner=make_pruner(spec.pruner),
                                load_if_exists=True)
    n = len(study.get_trials(deepcopy=False))
    if n and (spec.sampler or {}).get("seed") is not None:
        study.sampler = make_sampler({**spec.sampler, "seed": int(spec.sampler["seed"]) + n})
    return study


def run_sweep(spec: SweepSpec, out: Path, compose: ComposeFn, run: RunFn, n_trials: int | None = None,
              storage: str | None = None, extra: list[str] | None = None) -> optuna.Study:
    """Run (or continue) the sweep until `n_trials` trials have finished (complete or pruned). Each invocation
    runs at most the missing number of trials, so failing trials are retried by the next invocation only."""
    out.mkdir(parents=True, exist_ok=True)
    storage = storage or f"sqlite:///{(out / 'study.db').resolve()}"
    study = open_study(spec, storage)
    stale = fail_stale(study)
    if stale:
        log.warning("%d trial(s) left running by a killed sweep marked failed", stale)
    target = n_trials or spec.n_trials
    done = len(study.get_trials(deepcopy=False, states=FINISHED))
    if done < target:
        log.info("sweep %s: %d trial(s) finished, running %d more", spec.study_name, done, target - done)
        study.optimize(make_objective(spec, out, compose, run, list(extra or [])), n_trials=target - done,
                       catch=(Exception,), gc_after_trial=True)
    else:
        log.info("sweep %s: %d trial(s) finished already (target %d)", spec.study_name, done, target)
    report(study, spec, out)
    return study


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append({"number": t.number, "state": t.state.name, "value": t.value, **t.params,
                     "run_dir": t.user_attrs.get("run_dir", ""), "error": t.user_attrs.get("error", "")})
    return rows


def report(study: optuna.Study, spec: SweepSpec, out: Path) -> dict[str, Any]:
    """best.json, trials.csv, trials.md and PNG plots next to the study."""
    rows = trial_rows(study)
    keys = ["number", "state", "value", *spec.params, "run_dir", "error"]
    with open(out / "trials.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    md = ["| trial | state | " + spec.metric + " | " + " | ".join(spec.params) + " |",
          "|---" * (3 + len(spec.params)) + "|"]
    for r in rows:
        v = "" if r["value"] is None else f"{r['value']:.4f}"
        md.append(f"| {r['number']} | {r['state']} | {v} | " +
                  " | ".join(_fmt(r.get(k)) for k in spec.params) + " |")
    (out / "trials.md").write_text("\n".join(md) + "\n")
    best: dict[str, Any] = {"study": spec.study_name, "metric": spec.metric, "direction": spec.direction,
                            "trials": {s.name: sum(r["state"] == s.name for r in rows) for s in TrialState}}
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if complete:
        b = study.best_trial
        best.update(best_value=b.value, best_params=b.params, best_trial=b.number,
                    best_run_dir=b.user_attrs.get("run_dir"))
    (out / "best.json").write_text(json.dumps(best, indent=1))
    _plots(study, spec, out, complete)
    return best


def _fmt(v: Any) -> str:
    return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def _plots(study: optuna.Study, spec: SweepSpec, out: Path, complete: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not complete:
        return
    best_so_far, best = [], None
    for t in complete:
        better = best is None or (t.value > best if spec.direction == "maximize" else t.value < best)
        best = t.value if better else best
        best_so_far.append(best)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([t.number for t in complete], [t.value for t in complete], "o", label="trial")
    ax.plot([t.number for t in complete], best_so_far, "-", color="tab:red", label="best so far")
    ax.set(xlabel="trial", ylabel=spec.metric, title=f"{spec.study_name}: optimisation history")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "optimization_history.png", dpi=100)
    plt.close(fig)
    for name in spec.params:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot([t.params.get(name) for t in complete], [t.value for t in complete], "o")
        if spec.params[name].get("log"):
            ax.set_xscale("log")
        ax.set(xlabel=name, ylabel=spec.metric, title=f"{spec.metric} vs {name}")
        fig.tight_layout()
        fig.savefig(out / f"metric_vs_{name.replace('.', '_')}.png", dpi=100)
        plt.close(fig)
    try:
        imp = optuna.importance.get_param_importances(study)
    except Exception as e:  # too few trials, or no parameter varied
        log.info("no parameter importances: %s", e)
        return
    fig, ax = plt.subplots(figsize=(6, 0.6 + 0.5 * len(imp)))
    ax.barh(list(imp)[::-1], list(imp.values())[::-1])
    ax.set(xlabel="importance (PED-ANOVA)", title=f"{spec.study_name}: parameter importances")
    fig.tight_layout()
    fig.savefig(out / "param_importances.png", dpi=100)
    plt.close(fig)
