"""Optuna sweeps: spec checking, parameter sampling, pruning, failure handling, stop-and-resume in SQLite."""

import json
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import torch
import yaml
from optuna.trial import TrialState

from dreamgym_pl.pipeline import run_pipeline
from dreamgym_pl.sweep import PruningCallback, SweepSpecError, load_spec, run_sweep, suggest, to_overrides
from tests.conftest import ROOT, compose
from tests.test_pipeline import TINY


def _spec(tmp_path, **kw):
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(kw))
    return p


@pytest.mark.parametrize("spec,needle", [
    ({"study_name": "s"}, "missing key 'params'"),
    ({"study_name": "s", "params": {"algo.lr": {"type": "float", "low": 1, "high": 2}}, "metrc": "x"}, "unknown key 'metrc'"),
    ({"study_name": "s", "params": {"algo.lr": {"type": "floaty"}}}, "params.algo.lr"),
    ({"study_name": "s", "params": {"algo.lr": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}}, "log scale"),
    ({"study_name": "s", "params": {"algo.lr": {"type": "float", "low": 2, "high": 1}}}, "low 2 > high 1"),
    ({"study_name": "s", "params": {"x": {"type": "categorical", "choices": []}}}, "params.x"),
    ({"study_name": "s", "params": {"x": {"type": "int", "low": 1, "high": 3}}, "sampler": {"name": "grid2"}}, "sampler.name"),
    ({"study_name": "s", "params": {"x": {"type": "int", "low": 1, "high": 3}}, "direction": "up"}, "direction"),
    # tuning reads the validation split only: every test-split metric is refused, as objective or pruning signal
    ({"study_name": "s", "params": {"x": {"type": "int", "low": 1, "high": 3}}, "metric": "rl/test_success_rate"},
     "metric: 'rl/test_success_rate' is measured on the test split"),
    ({"study_name": "s", "params": {"x": {"type": "int", "low": 1, "high": 3}}, "metric": "eval/success_rate"},
     "metric: 'eval/success_rate' is measured on the test split"),
    ({"study_name": "s", "params": {"x": {"type": "int", "low": 1, "high": 3}}, "prune_on": "test/success_rate"},
     "prune_on: 'test/success_rate' is measured on the test split"),
])
def test_bad_spec_names_the_key(tmp_path, spec, needle):
    with pytest.raises(SweepSpecError, match="spec.yaml") as e:
        load_spec(_spec(tmp_path, **spec))
    assert needle in str(e.value)


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps").glob("*.yaml")))
def test_shipped_specs_compose(path):
    """Every shipped spec loads, optimises a validation metric, and its overrides plus sampled values compose into
    a valid config that evaluates val goals."""
    spec = load_spec(path)
    assert spec.metric.endswith("/val_success_rate")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    params = suggest(study.ask(), spec.params)
    cfg = compose([*spec.overrides, *to_overrides(params)])
    assert cfg.eval.val_goals > 0
    for k, v in params.items():
        assert cfg[k.split(".")[0]][k.split(".")[1]] == pytest.approx(v)


def test_suggest_respects_bounds_and_types():
    space = {"a": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True}, "b": {"type": "int", "low": 2, "high": 4},
             "c": {"type": "categorical", "choices": ["x", "y"]}}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(20):
        p = suggest(study.ask(), space)
        assert 1e-5 <= p["a"] <= 1e-3 and p["b"] in (2, 3, 4) and p["c"] in ("x", "y")
    assert to_overrides({"a": 0.1, "b": 3, "c": "x"}) == ["a=0.1", "b=3", 'c="x"']


def test_pruning_callback_reports_once_per_iteration_and_prunes():
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(lower=0.5))
    trial = study.ask()
    cb = PruningCallback(trial, "rollout/success_rate")
    trainer = SimpleNamespace(callback_metrics={"rollout/success_rate": torch.tensor(0.8),
                                                "rollout/iteration": torch.tensor(0.0)})
    cb.on_train_batch_end(trainer, None, None, None, 0)
    cb.on_train_batch_end(trainer, None, None, None, 1)  # same iteration: no second report
    assert cb.step == 1
    trainer.callback_metrics = {"rollout/success_rate": torch.tensor(0.1), "rollout/iteration": torch.tensor(1.0)}
    with pytest.raises(optuna.TrialPruned):
        cb.on_train_batch_end(trainer, None, None, None, 2)
    frozen = study.get_trials(deepcopy=False)[0]
    assert frozen.intermediate_values == pytest.approx({0: 0.8, 1: 0.1})


def _compose(overrides):
    return compose(overrides)


@pytest.fixture(scope="module")
def sft_start(tmp_path_factory):
    d = tmp_path_factory.mktemp("sft_start")
    run_pipeline(compose(["stages=[collect,sft]", *TINY]), d)
    return d


def test_sweep_stop_and_resume(tmp_path, sft_start):
    """A 3-trial sweep stopped after 2 trials and resumed: 3 completed trials in SQLite, each with its own
    TensorBoard directory and hparams; a trial left running by a kill is marked failed on resume."""
    spec = load_spec(_spec(tmp_path, study_name="t", metric="rl/val_success_rate", n_trials=3,
                           sampler={"name": "random", "seed": 0}, pruner={"name": "none"},
                           overrides=["stages=[collect,sft,rl]", *TINY, "rl.real_budget=24", "eval.curve_every=1",
                                      "eval.curve_goals=4"],
                           start_from=str(sft_start), params={"algo.lr": {"type": "float", "low": 1e-5, "high": 1e-3,
                                                                          "log": True}}))
    out = tmp_path / "sweep"
    study = run_sweep(spec, out, _compose, run_pipeline, n_trials=2)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 2
    study.ask()  # a trial a killed sweep left RUNNING
    study = run_sweep(spec, out, _compose, run_pipeline)  # the spec's n_trials = 3 finished
    again = optuna.load_study(study_name="t", storage=f"sqlite:///{(out / 'study.db').resolve()}")
    done = again.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 3 and len(again.get_trials(states=(TrialState.FAIL,))) == 1
    assert len({t.params["algo.lr"] for t in done}) == 3
    for t in done:
        d = Path(t.user_attrs["run_dir"])
        assert list((d / "tb" / "rl").glob("events.out.tfevents.*")) and list((d / "tb" / "hparams").glob("events*"))
        history = json.loads((d / "history" / "rl.json").read_text())
        assert any("val/success_rate" in h for h in history)  # the curve is on val (eval.curve_split)
        assert not any("test/success_rate" in h for h in history)
    assert (out / "best.json").exists() and (out / "optimization_history.png").exists()
    assert (out / "metric_vs_algo_lr.png").exists()
    assert "COMPLETE" in (out / "trials.md").read_text()


def test_failing_trials_are_recorded_and_the_sweep_goes_on(tmp_path):
    spec = load_spec(_spec(tmp_path, study_name="f", n_trials=2, sampler={"name": "random", "seed": 0},
                           overrides=["stages=[collect]"],
                           params={"rl.tasks_per_iter": {"type": "categorical", "choices": [0, -1]}}))
    study = run_sweep(spec, tmp_path / "sweep", _compose, run_pipeline)
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert len(failed) == 2
    assert all("rl.tasks_per_iter" in t.user_attrs["error"] for t in failed)


def test_cli_parses_overrides_after_options_and_rejects_bad_specs(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweeps_run", ROOT / "sweeps" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = mod.parse(["sweeps/curriculum.yaml", "--n-trials", "3", "--start-from", "D", "algo.lr=1e-4", "seed=2"])
    assert a.n_trials == 3 and a.start_from == "D" and a.overrides == ["algo.lr=1e-4", "seed=2"]
    bad = _spec(tmp_path, study_name="s", params={"x": {"type": "nope"}})
    assert mod.main([str(bad)]) == 2
    assert "params.x" in capsys.readouterr().err
