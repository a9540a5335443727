"""The DeepSpeed (trainer=deepspeed) path, checked on CPU against Lightning's and DeepSpeed's own objects where they
build without a GPU, and fakes where they do not (issue 54): the logging batch size of our pre-batched loaders,
float32 batches under DeepSpeed's bfloat16, DeepSpeedCPUAdam under ZeRO-Offload, ZeRO's per-rank optimizer state on
save / resume, PPO's value head in DeepSpeed's bfloat16, and a resumed stage's TensorBoard steps."""

from __future__ import annotations

import types

import pytest
import torch

from conftest import compose


def _strategy(**kw):
    from hydra.utils import instantiate

    cfg = compose(["trainer=deepspeed", *[f"trainer.strategy.{k}={v}" for k, v in kw.items()]])
    return instantiate(cfg.trainer.strategy), cfg


def _ds_trainer(tmp_path, stage="rl"):
    """`Run.trainer` under trainer=deepspeed (ZeRO-2, bf16-mixed), on the CPU accelerator: Lightning builds the
    strategy, its config and its precision plugin without a GPU (its setup, which starts DeepSpeed, is not run)."""
    from dreamgym_pl.stages.context import Run

    run = Run.__new__(Run)
    run.cfg = compose(["trainer=deepspeed", "trainer.accelerator=cpu", "trainer.devices=1"])
    run.dir, run.callbacks = tmp_path, []
    return run.trainer(stage)


def test_deepspeed_config_has_a_batch_size_for_pre_batched_loaders(tmp_path):
    """Our loaders yield whole batches (DataLoader(batch_size=None): no batch sampler); Lightning's DeepSpeed strategy
    reads `batch_sampler.batch_size` unless the config names `train_micro_batch_size_per_gpu` (an AttributeError on
    None before): the run's trainer sets it, so the strategy's setup of the DeepSpeed config passes."""
    trainer = _ds_trainer(tmp_path)
    strategy = trainer.strategy
    assert type(strategy).__name__ == "DeepSpeedStrategy"
    loader = torch.utils.data.DataLoader([{"input_ids": torch.zeros(2, 3, dtype=torch.long)}], batch_size=None)
    trainer.fit_loop._data_source = types.SimpleNamespace(is_defined=lambda: True, dataloader=lambda: loader)
    strategy._lightning_module = types.SimpleNamespace(trainer=trainer)
    strategy._format_batch_size_and_grad_accum_config()
    assert strategy.config["train_micro_batch_size_per_gpu"] >= 1
    assert strategy.config["zero_optimization"]["stage"] == 2


def test_deepspeed_batches_keep_float32_for_the_loss(tmp_path):
    """Under DeepSpeed's bf16 the loss must see old_logp / ref_logp / adv / returns as computed (float32); Lightning's
    DeepSpeedPrecision.convert_input cast them to bfloat16. Checked on what the run's trainer hands a training step
    (the training epoch loop calls `trainer.precision_plugin.convert_input(batch)`)."""
    trainer = _ds_trainer(tmp_path)
    old_logp = torch.randn(2, 4, dtype=torch.float32) * 1e-3 - 3.0
    batch = {"input_ids": torch.ones(2, 5, dtype=torch.long), "attention_mask": torch.ones(2, 5, dtype=torch.long),
             "loss_mask": torch.ones(2, 4), "old_logp": old_logp, "ref_logp": old_logp.clone(),
             "adv": torch.tensor([0.1234567, -0.7654321]), "returns": torch.tensor([1.0, 0.0])}
    seen = trainer.precision_plugin.convert_input(batch)
    for k in ("old_logp", "ref_logp", "adv", "returns", "loss_mask"):
        assert seen[k].dtype == torch.float32, k
    assert torch.equal(seen["old_logp"], old_logp)
    assert seen["input_ids"].dtype == torch.long
    assert trainer.precision_plugin.precision == "bf16-mixed"  # what the DeepSpeed config's bf16 is made from


def test_configure_trainer_leaves_other_strategies_alone():
    from dreamgym_pl.policy.zero import configure_trainer

    t = types.SimpleNamespace(strategy="ddp")
    assert configure_trainer(t) is t and t.strategy == "ddp"


def test_offloaded_optimizer_is_deepspeed_cpu_adam(monkeypatch):
    """offload_optimizer=true: DeepSpeed refuses a torch optimizer (zero_force_ds_cpu_optimizer), so the policy's
    configure_optimizers gives DeepSpeedCPUAdam (a fake here: the real one compiles a C++ op), in AdamW mode with the
    same groups; without offload, torch's AdamW as before."""
    import deepspeed.ops.adam

    from dreamgym_pl.policy.algos import SFT
    from dreamgym_pl.policy.module import PolicyModule
    from test_engine import _tiny_model_and_tokenizer

    made = []

    class FakeCPUAdam(torch.optim.AdamW):
        def __init__(self, params, lr, weight_decay, adamw_mode):
            made.append(dict(lr=lr, weight_decay=weight_decay, adamw_mode=adamw_mode))
            super().__init__(params, lr=lr, weight_decay=weight_decay)

    monkeypatch.setattr(deepspeed.ops.adam, "DeepSpeedCPUAdam", FakeCPUAdam)
    model, tok = _tiny_model_and_tokenizer()
    module = PolicyModule(model, tok, SFT(), lr=1e-3)
    strategy, _ = _strategy(offload_optimizer="true")
    assert strategy.config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    module._trainer = types.SimpleNamespace(strategy=strategy)
    opt = module.configure_optimizers()
    assert isinstance(opt, FakeCPUAdam) and made == [dict(lr=1e-3, weight_decay=0.01, adamw_mode=True)]
    assert opt.param_groups[0]["weight_decay"] == 0.0  # the group's own, as under AdamW
    plain, _ = _strategy()
    module._trainer = types.SimpleNamespace(strategy=plain)
    assert type(module.configure_optimizers()) is torch.optim.AdamW


class DeepSpeedZeroOptimizer:
    """A fake ZeRO-1/2 optimizer (the class name is what marks one): a per-rank partition as its state, and a
    `load_state_dict` that indexes the list of every rank's by its data-parallel rank, as DeepSpeed's does."""

    def __init__(self, rank: int, value: float):
        self.rank, self.value, self.loaded = rank, value, None

    def state_dict(self):
        return {"partition": torch.full((3,), self.value), "rank": self.rank, "ds_version": "0.19"}

    def load_state_dict(self, state_dict_list):
        self.loaded = state_dict_list[self.rank]


def test_zero_optimizer_state_is_saved_per_rank_and_restored_as_a_list(tmp_path, monkeypatch):
    """A supervised stage's step checkpoint under ZeRO (one GPU: step checkpoints are kept by one process): the
    partition is saved as a rank's and a resume hands the optimizer the list of partitions (before: the dict, which
    ZeRO's load_state_dict indexed by rank). A torch optimizer keeps one optimizer.pt and its state."""
    from dreamgym_pl import dist
    from dreamgym_pl.stages.resume import StepCheckpoint, load_step_state, restore_optimizer

    run = types.SimpleNamespace(dir=tmp_path, cfg=types.SimpleNamespace(resume=True))
    net = torch.nn.Linear(2, 1)
    monkeypatch.setattr(dist, "world", lambda: 1)
    trainer = types.SimpleNamespace(optimizers=[DeepSpeedZeroOptimizer(0, 1.0)], lr_scheduler_configs=[])
    StepCheckpoint(run, "sft", 2, 4).save(trainer, net, 2)
    state = load_step_state(run, "sft", net)
    assert isinstance(state["optimizer"], list) and len(state["optimizer"]) == 1
    opt = DeepSpeedZeroOptimizer(0, 0.0)
    restore_optimizer(types.SimpleNamespace(optimizers=[opt], lr_scheduler_configs=[]), state)  # KeyError 0 before
    assert opt.loaded["rank"] == 0 and torch.equal(opt.loaded["partition"], torch.full((3,), 1.0))

    lin = torch.nn.Linear(2, 1)
    adam = torch.optim.AdamW(lin.parameters())
    lin(torch.ones(1, 2)).sum().backward()
    adam.step()
    run2 = types.SimpleNamespace(dir=tmp_path / "plain", cfg=types.SimpleNamespace(resume=True))
    StepCheckpoint(run2, "sft", 2, 4).save(types.SimpleNamespace(optimizers=[adam], lr_scheduler_configs=[]), lin, 2)
    again = torch.optim.AdamW(lin.parameters())
    restore_optimizer(types.SimpleNamespace(optimizers=[again], lr_scheduler_configs=[]),
                      load_step_state(run2, "sft", lin))
    assert again.state_dict()["state"][0]["step"] == 1


def test_rl_checkpoint_saves_zero_partitions_of_every_rank(tmp_path, monkeypatch):
    """save_rl_checkpoint under ZeRO: the optimizer partition of this rank (a non-main rank included), not rank 0's
    state_dict alone."""
    from dreamgym_pl import dist
    from dreamgym_pl.stages import policy as policy_stage

    run = types.SimpleNamespace(dir=tmp_path)
    monkeypatch.setattr(dist, "rank", lambda: 1)
    monkeypatch.setattr(dist, "is_main", lambda: False)
    monkeypatch.setattr(dist, "barrier", lambda: None)
    vdir = tmp_path / "checkpoints" / "rl" / "resume" / "it-000003"
    vdir.mkdir(parents=True)
    trainer = types.SimpleNamespace(optimizers=[DeepSpeedZeroOptimizer(1, 5.0)], global_step=7, loggers=[])
    module = types.SimpleNamespace(trainer=trainer)
    dm = types.SimpleNamespace(iteration=3, pending=None, pending_iteration=-1, last=None)
    policy_stage.save_rl_checkpoint(run, "rl", module, dm)
    assert (vdir / "optimizer_rank1.pt").exists()  # before: only rank 0 saved (its own partition)
    from dreamgym_pl.policy.zero import read_optimizer, save_optimizer

    save_optimizer(DeepSpeedZeroOptimizer(0, 4.0), vdir, rank=0, main=True)
    assert [p["rank"] for p in read_optimizer(vdir)] == [0, 1]  # what a resume hands every rank's ZeRO optimizer


def test_ppo_value_head_runs_in_deepspeeds_bfloat16():
    """DeepSpeed's bf16 converts the whole module, the value head too; its float32 input then failed (mat1 and mat2
    dtypes). The input follows the head's dtype; values come back float32."""
    from dreamgym_pl.policy.algos import rl_algorithm
    from dreamgym_pl.policy.module import PolicyModule
    from test_engine import _tiny_model_and_tokenizer

    cfg = compose(["algo=ppo"]).algo
    model, tok = _tiny_model_and_tokenizer()
    module = PolicyModule(model, tok, rl_algorithm(cfg), lr=1e-3)
    module.value_head.to(torch.bfloat16)
    v = module.values_from_hidden(torch.randn(2, 5, 32), torch.tensor([1, 3]))
    assert v.dtype == torch.float32 and v.shape == (2,)


def test_resumed_stage_continues_its_tensorboard_steps(tmp_path):
    """A resumed stage logs into the same tb/<stage> folder: its steps go on from the checkpoint's (step checkpoints:
    their step; RL checkpoints: the global step they record) instead of restarting at 0; a fresh stage starts at 0."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from dreamgym_pl.stages.callbacks import RLCheckpoint
    from dreamgym_pl.stages.context import Run
    from dreamgym_pl.stages.resume import StepCheckpoint

    run = Run.__new__(Run)
    run.cfg, run.dir, run.callbacks = compose(), tmp_path, []
    for stage, cb, start in (("sft", StepCheckpoint(run, "sft", 5, 10, {"step": 4}), 4),
                             ("rl", RLCheckpoint(lambda m, d: None, 1, {"global_step": 9, "consumed": 0}), 9),
                             ("fresh", StepCheckpoint(run, "fresh", 5, 10, None), 0)):
        trainer = run.trainer(stage, [cb])
        cb.on_train_start(trainer, None)
        trainer.logger.log_metrics({"loss": 1.0}, step=0)
        trainer.logger.log_metrics({"loss": 0.5}, step=1)
        trainer.logger.finalize("success")
        acc = EventAccumulator(str(tmp_path / "tb" / stage))
        acc.Reload()
        assert [e.step for e in acc.Scalars("loss")] == [start, start + 1], stage
