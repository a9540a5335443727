"""The real-model path on CPU: a small HF-format Llama (random weights) with a byte-level BPE tokenizer trained
offline on the env's text, both saved with `save_pretrained`, run as `model=hf model.name_or_path=<folder>`
through collect -> sft -> experience -> synthetic_rl -> s2r -> eval, with LoRA (adapter kept or merged) and
without, and a resume after a crash in the middle of s2r.

Every training stage is watched by a Lightning callback attached to its real Trainer (`run_pipeline(callbacks=)`):
it must start with trainable parameters, start from the weights the previous stage saved, change them, and its
checkpoint must reload (as `load_pretrained` does for the next stage) as the right class with those weights."""

import logging

import lightning as L
import pytest
import torch

from dreamgym_pl.models import load_pretrained, write_hf_checkpoint
from dreamgym_pl.pipeline import run_pipeline
from tests.conftest import compose
from tests.test_pipeline import EXP

STAGES = "[collect,sft,experience,synthetic_rl,s2r,eval]"
SMALL = ["conf=webshop_s2r", "model.dtype=float32", "model.lora.r=4", "model.lora.alpha=8",
         "env.num_products=60", "env.num_test=20", "env.num_val=10", "env.max_steps=4", "collect.agents.oracle=20",
         "collect.agents.noisy_oracle=10", "collect.agents.random=6", "++collect.agents.hasty=20", "sft.num_trajectories=8", "sft.max_steps=3",
         "sft.warmup_steps=1", "sft.lr=1e-2", "sft.batch_size=8", "sft.copy_steps=2", "sft.copy_length=8",
         "eval.num_goals=4", "eval.batch_size=4",
         "eval.curve_every=0", "algo.group_size=2", "algo.mini_batch_size=8", "algo.max_new_tokens=6",
         "algo.lr=1e-2", "algo.warmup_steps=0", "experience.lr=1e-2", "experience.batch_size=8",
         "trainer.enable_progress_bar=false", "rollout.samples_every=0", *EXP,
         "experience.max_transitions=40", "experience.max_steps=3", "experience.judge_steps=4",
         "experience.onpolicy_episodes=2", "experience.max_new_tokens=24", "curriculum.train_examples=4",
         "synthetic_rl.synthetic_budget=8", "synthetic_rl.tasks_per_iter=2", "s2r.real_budget=60",
         "s2r.tasks_per_iter=2", "checkpoint_every=1",
         # at 8 synthetic transitions of an untrained experience model the preset's `model` + ending rules left
         # synthetic_rl's weights unchanged (no reward spread); with `end` it trains, which these adapter checks need
         "experience.invalid_action=end", "experience.ending_rules=false"]
POLICY_CHAIN = ["sft", "synthetic_rl", "s2r"]  # each starts from the one before


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """<folder>/config.json + model.safetensors + tokenizer files, as a downloaded checkpoint would be: a
    byte-level BPE tokenizer trained on the env's text (`Run.tokenizer_corpus`), a random-weight Llama."""
    from dreamgym_pl.stages import Run

    run = Run(compose(["conf=webshop_s2r", *SMALL[4:8]]), tmp_path_factory.mktemp("corpus_run"))
    return write_hf_checkpoint(tmp_path_factory.mktemp("hf_llama"), run.tokenizer_corpus())


class StageProbe(L.Callback):
    """What each training stage's Trainer saw: the model's class, its trainable parameters at the start and end."""

    def __init__(self):
        self.seen: dict[str, dict] = {}

    @staticmethod
    def _trainable(model):
        return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}

    def on_fit_start(self, trainer, pl_module):
        start = self._trainable(pl_module.model)
        every = {n: p.detach().cpu().clone() for n, p in pl_module.model.named_parameters()}
        self.seen[trainer.logger.name] = {"cls": type(pl_module.model).__name__, "start": start, "all_start": every,
                                          "trainable": sum(p.numel() for p in start.values())}

    def on_fit_end(self, trainer, pl_module):
        self.seen[trainer.logger.name]["end"] = self._trainable(pl_module.model)

    def on_exception(self, trainer, pl_module, exception):
        self.on_fit_end(trainer, pl_module)


class CrashAt(L.Callback):
    """Fails the run at an RL iteration of `stage` (after that iteration's checkpoint is saved), as a killed job."""

    def __init__(self, stage: str, iteration: int):
        self.stage, self.iteration = stage, iteration

    def on_rollout_iteration_start(self, trainer, pl_module, dm):
        if trainer.logger.name == self.stage and dm.iteration >= self.iteration:
            raise RuntimeError(f"crash injected in {self.stage} at iteration {dm.iteration}")


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _check_stages(probe: StageProbe, run_dir, stages, cls: str, trainable_share: float):
    for st in stages:
        rec = probe.seen[st]
        assert rec["trainable"] > 0, f"{st}: no trainable parameters at the start"
        assert rec["cls"] == cls, (st, rec["cls"])
        assert not _same(rec["start"], rec["end"]), f"{st}: training left the weights unchanged"
        model, _ = load_pretrained(run_dir / "checkpoints" / st, "float32")  # as the next stage reloads it
        assert type(model).__name__ == cls, (st, type(model).__name__)
        total = sum(p.numel() for p in model.parameters())
        reloaded = StageProbe._trainable(model)
        assert 0 < sum(p.numel() for p in reloaded.values()) <= trainable_share * total
        assert _same(reloaded, rec["end"]), f"{st}: the checkpoint does not hold the trained weights"


def test_real_model_lora_adapters_kept_with_resume(tmp_path, hf_folder, caplog):
    """LoRA, adapters kept (the default): every checkpoint is an adapter folder that reloads as a trainable
    PeftModel, each policy stage trains on the previous stage's adapter; a crash in s2r resumes from its last
    adapter checkpoint."""
    args = ["model=hf", f"model.name_or_path={hf_folder}", f"stages={STAGES}", *SMALL]
    probe = StageProbe()
    with pytest.raises(RuntimeError, match="crash injected"):
        run_pipeline(compose(args), tmp_path, callbacks=[probe, CrashAt("s2r", 2)])
    for st in ("sft", "experience", "synthetic_rl"):
        assert (tmp_path / "checkpoints" / st / "adapter_model.safetensors").exists()
        assert not (tmp_path / "checkpoints" / st / "model.safetensors").exists()
    _check_stages(probe, tmp_path, ["sft", "experience", "synthetic_rl"], "PeftModelForCausalLM", 0.5)
    assert _same(probe.seen["synthetic_rl"]["start"], probe.seen["sft"]["end"])  # the sft adapter, trained on
    crashed = probe.seen["s2r"]
    assert crashed["trainable"] > 0 and not _same(crashed["start"], crashed["end"])

    probe2 = StageProbe()
    with caplog.at_level(logging.INFO, logger="dreamgym_pl"):
        m = run_pipeline(compose([*args, "resume=true"]), tmp_path, callbacks=[probe2])
    assert "s2r: resuming from iteration 2" in caplog.text
    assert set(probe2.seen) == {"s2r"}  # completed stages are skipped
    _check_stages(probe2, tmp_path, ["s2r"], "PeftModelForCausalLM", 0.5)
    assert not _same(probe2.seen["s2r"]["start"], probe.seen["synthetic_rl"]["end"])  # the s2r checkpoint, not
    assert 0 < m["s2r/real_transitions"] <= 60 and 0.0 <= m["eval/success_rate"] <= 1.0  # the stage's start


def test_real_model_lora_merged(tmp_path, hf_folder):
    """merge_lora=true: every checkpoint holds full weights W + (alpha/r) B A, and the next stage trains a fresh
    adapter on top of them."""
    probe = StageProbe()
    m = run_pipeline(compose(["model=hf", f"model.name_or_path={hf_folder}", f"stages={STAGES}", *SMALL,
                              "model.merge_lora=true"]), tmp_path, callbacks=[probe])
    q = "model.layers.0.self_attn.q_proj"
    bases = {"sft": hf_folder, "experience": hf_folder, "synthetic_rl": tmp_path / "checkpoints" / "sft",
             "s2r": tmp_path / "checkpoints" / "synthetic_rl"}
    for st, base_dir in bases.items():
        rec = probe.seen[st]
        assert rec["cls"] == "PeftModelForCausalLM" and rec["trainable"] > 0
        assert not _same(rec["start"], rec["end"]), f"{st}: training left the weights unchanged"
        assert not (tmp_path / "checkpoints" / st / "adapter_config.json").exists()
        saved, _ = load_pretrained(tmp_path / "checkpoints" / st, "float32")
        base, _ = load_pretrained(base_dir, "float32")
        assert type(saved).__name__ == "LlamaForCausalLM"
        w0 = base.get_submodule(q).weight
        assert torch.equal(rec["all_start"][f"base_model.model.{q}.base_layer.weight"], w0)  # started on its base
        a, b = rec["end"][f"base_model.model.{q}.lora_A.default.weight"], rec["end"][f"base_model.model.{q}.lora_B.default.weight"]
        assert b.abs().sum() > 0
        assert torch.allclose(saved.get_submodule(q).weight, w0 + (8 / 4) * b @ a, atol=1e-6)
    assert 0.0 <= m["eval/success_rate"] <= 1.0


def test_real_model_full_finetune(tmp_path, hf_folder):
    """No LoRA: full fine-tuning; full checkpoints, each policy stage starting from the one before."""
    probe = StageProbe()
    m = run_pipeline(compose(["model=hf", f"model.name_or_path={hf_folder}", f"stages={STAGES}", *SMALL,
                              "model.lora.enabled=false"]), tmp_path, callbacks=[probe])
    _check_stages(probe, tmp_path, ["sft", "experience", "synthetic_rl", "s2r"], "LlamaForCausalLM", 1.0)
    for prev, st in zip(POLICY_CHAIN, POLICY_CHAIN[1:]):
        assert _same(probe.seen[st]["start"], probe.seen[prev]["end"])
    assert not _same(probe.seen["experience"]["start"], probe.seen["sft"]["end"])  # its own model, from the base
    assert 0.0 <= m["eval/success_rate"] <= 1.0


def test_real_model_lora_sft_dpo_rl(tmp_path, hf_folder):
    """The issue's failing command (rl after sft, adapters kept) with dpo between: each stage trains the adapter
    the previous one saved, and its KL/DPO reference is that starting adapter (a frozen copy), not the base."""
    probe = StageProbe()
    m = run_pipeline(compose(["model=hf", f"model.name_or_path={hf_folder}", "stages=[collect,sft,dpo,rl,eval]", *SMALL,
                              "rl.real_budget=16", "rl.tasks_per_iter=2", "dpo.batch_size=8", "dpo.max_pairs=8"]),
                     tmp_path, callbacks=[probe])
    _check_stages(probe, tmp_path, ["sft", "dpo", "rl"], "PeftModelForCausalLM", 0.5)
    for prev, st in (("sft", "dpo"), ("dpo", "rl")):
        assert _same(probe.seen[st]["start"], probe.seen[prev]["end"])
        ref = {n.replace(".reference.", ".default."): p for n, p in probe.seen[st]["all_start"].items() if ".reference." in n}
        assert _same(ref, probe.seen[prev]["end"])  # the reference adapter: the stage's starting adapter
    assert m["rl/real_transitions"] >= 16 and 0.0 <= m["eval/success_rate"] <= 1.0


def test_real_model_tiny_with_lora(tmp_path):
    """The embedded tiny model with model.lora.enabled=true trains adapters over its saved base like a real one."""
    probe = StageProbe()
    tiny = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64"]
    run_pipeline(compose(["stages=[collect,sft,rl,eval]", *SMALL[4:], *tiny, "model.lora.enabled=true",
                          "rl.real_budget=16", "rl.tasks_per_iter=2"]), tmp_path, callbacks=[probe])
    _check_stages(probe, tmp_path, ["sft", "rl"], "PeftModelForCausalLM", 0.5)
    assert _same(probe.seen["rl"]["start"], probe.seen["sft"]["end"])
