"""Typed configuration, one dataclass per component, exposed as dotted flags (`--train.steps`) and as env
(`DDP_TRAINER_TRAIN_STEPS`). Precedence: dataclass default < env < flag, so a pod template's env sets a
baseline and the container args still win."""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_PREFIX = "DDP_TRAINER_"
WORKLOADS = ("digits", "cnn", "gpt")
LR_SCALINGS = ("auto", "linear", "sqrt", "none")
DEVICES = ("auto", "cuda")
COMPILE_MODES = ("auto", "on", "off")
# `--ddp.compile true` was the flag's form while it was a boolean: it still means on.
COMPILE_ALIASES = {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}


class MicroBatchSize(int):
    """--train.micro-batch-size: samples, or `auto` (held as -1, micro_batch.AUTO): the largest that fits the
    device."""

    expects = "an int or auto"

    def __new__(cls, value: int | str = 0):
        if isinstance(value, str) and value.strip().lower() == "auto":
            value = -1
        return super().__new__(cls, value)


@dataclass
class TrainConfig:
    steps: int = 200  # optimizer steps in total, across restarts
    batch_size_per_rank: int = 32  # used when global_batch_size is 0: global batch = this x world size
    global_batch_size: int = 0  # > 0 fixes the global batch; each rank gets B/N, the first B%N ranks one more
    grad_accum_steps: int = 1  # micro-batches per optimizer step at least, all but the last under no_sync
    # Largest per-rank micro-batch; 0: what the first attempt ran; auto: the largest that fits (both kept in
    # checkpoints)
    micro_batch_size: MicroBatchSize = MicroBatchSize(0)
    lr: float = 1e-3  # the peak learning rate at the reference batch (lr_reference_batch)
    lr_scaling: str = "auto"  # how the LR follows the global batch: linear | sqrt | none | auto (sgd linear, else sqrt)
    lr_reference_batch: int = 0  # global batch that lr is for; 0: global_batch_size if set, else batch_size_per_rank
    warmup_steps: int = 0
    decay: str = "cosine"  # cosine | constant, after warm-up
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    optimizer: str = "adamw"  # adamw | sgd
    momentum: float = 0.9  # sgd only
    grad_clip: float = 0.0  # 0 disables
    fused: str = "auto"  # AdamW's fused kernel: auto (on CUDA) | on | off (device_options.py)
    seed: int = 0


@dataclass
class DataConfig:
    workers: int = -1  # DataLoader worker processes per rank; -1: by device (CUDA up to 4, CPU 0)
    pin_memory: bool = True  # only takes effect on CUDA
    shuffle: bool = True


@dataclass
class DDPConfig:
    sync_batchnorm: bool = False
    find_unused_parameters: bool = False
    static_graph: bool = False
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = True
    comm_hook: str = "none"  # none | bf16 (gradients sent as bf16) | powersgd (low-rank, --ddp.powersgd-rank)
    powersgd_rank: int = 1  # PowerSGD's matrix approximation rank: higher is closer to exact, and sends more
    compile: str = "auto"  # torch.compile the model: auto (on CUDA; off on CPU and under torchft) | on | off
    autocast: str = "auto"  # auto (CUDA: bf16 where supported, else fp16 + GradScaler; CPU: off) | bf16 | fp16 | off
    tf32: bool = True  # TF32 for fp32 matmuls and convolutions on CUDA


@dataclass
class ModelConfig:
    preset: str = "tiny"  # per workload: tiny (CPU tests) | small (GPT-small 124M, ResNet-ish CNN)
    layers: int = 0  # 0 keeps the preset's value
    width: int = 0
    heads: int = 0
    seq_len: int = 0
    vocab_size: int = 0
    image_size: int = 0
    train_samples: int = 0  # synthetic workloads: size of the training set
    activation_checkpointing: bool = False  # gpt: recompute each block in the backward instead of keeping it


@dataclass
class CheckpointConfig:
    dir: str = ""  # shared by all ranks; empty disables checkpoints (and resume)
    every_steps: int = 0  # 0 disables the step cadence
    every_seconds: float = 0.0  # 0 disables the time cadence
    keep: int = 3  # newest checkpoints kept
    on_finish: bool = True  # write a final checkpoint at the target step
    format: str = (
        "auto"  # file: rank 0 writes one file | dcp: every rank a share (checkpoint_dcp.py) | auto: dcp on CUDA
    )
    async_save: bool = True  # dcp: stage to host memory, then write in the background while training goes on


@dataclass
class MetricsConfig:
    port: int = 9400  # base port, + LOCAL_RANK; 0 disables the endpoint
    peak_tflops: float = 0.0  # one GPU's dense peak for ddp_trainer_mfu; 0: looked up by device name


@dataclass
class LogConfig:
    every_steps: int = 10  # progress line cadence
    all_ranks: bool = False  # progress lines from every rank, not just each node's local rank 0


@dataclass
class Config:
    workload: str = "digits"
    entrypoint: str = ""  # module:function or path/to/script.py[:function]; overrides --workload
    device: str = "auto"  # auto: CUDA when usable, else CPU; cuda: exit 69 if CUDA is not usable (gpu_check.py)
    peer_timeout_seconds: float = 0.0  # > 0: leave a node silent this long (peer_watch.py); 0: no watch
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    log: LogConfig = field(default_factory=LogConfig)


class ConfigError(ValueError):
    """A flag or env value that cannot be used; the message names the flag or variable."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        """An unknown or malformed flag is a ConfigError like a bad value, not argparse's SystemExit(2): main()
        records it in the error file, so the operator's status shows it rather than torchrun's exit table."""
        raise ConfigError(message)


def flag_name(section: str | None, name: str) -> str:
    dashed = name.replace("_", "-")
    return f"--{section}.{dashed}" if section else f"--{dashed}"


def env_name(section: str | None, name: str) -> str:
    return ENV_PREFIX + (f"{section}_{name}" if section else name).upper()


def parse_value(kind: type, text: str, where: str):
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected a boolean (true/false/1/0), got {text!r}")
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{where}: expected {getattr(kind, 'expects', kind.__name__)}, got {text!r}") from None


def _leaf_fields(cls) -> list[tuple[str | None, dataclasses.Field, type]]:
    hints = typing.get_type_hints(cls)
    out: list[tuple[str | None, dataclasses.Field, type]] = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            sub_hints = typing.get_type_hints(kind)
            out.extend((f.name, sf, sub_hints[sf.name]) for sf in dataclasses.fields(kind))
        else:
            out.append((None, f, kind))
    return out


def parse_config(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    environ = os.environ if environ is None else environ
    cfg = Config()
    parser = _Parser(prog="ddp_trainer", description="torchrun DDP trainer harness")
    for section, f, kind in _leaf_fields(Config):
        target = getattr(cfg, section) if section else cfg
        env = env_name(section, f.name)
        if env in environ:
            setattr(target, f.name, parse_value(kind, environ[env], f"env {env}"))
        parser.add_argument(
            flag_name(section, f.name),
            dest=f"{section or ''}.{f.name}",
            default=None,
            metavar=kind.__name__.upper(),
            help=f"env {env} (default {getattr(target, f.name)!r})",
        )
    args = parser.parse_args(argv)
    for section, f, kind in _leaf_fields(Config):
        text = getattr(args, f"{section or ''}.{f.name}")
        if text is not None:
            target = getattr(cfg, section) if section else cfg
            setattr(target, f.name, parse_value(kind, text, flag_name(section, f.name)))
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    problems = []
    if not cfg.entrypoint and cfg.workload not in WORKLOADS:
        problems.append(f"--workload must be one of {', '.join(WORKLOADS)}, got {cfg.workload!r}")
    if cfg.device not in DEVICES:
        problems.append(f"--device must be auto or cuda, got {cfg.device!r}")
    if cfg.peer_timeout_seconds < 0:
        problems.append(f"--peer-timeout-seconds must be >= 0 (0: no watch), got {cfg.peer_timeout_seconds}")
    if cfg.train.steps < 1:
        problems.append(f"--train.steps must be >= 1, got {cfg.train.steps}")
    if cfg.train.grad_accum_steps < 1:
        problems.append(f"--train.grad-accum-steps must be >= 1, got {cfg.train.grad_accum_steps}")
    if cfg.train.global_batch_size < 0 or (cfg.train.global_batch_size == 0 and cfg.train.batch_size_per_rank < 1):
        problems.append("--train.global-batch-size must be > 0, or --train.batch-size-per-rank >= 1")
    if cfg.train.micro_batch_size < -1:
        problems.append(f"--train.micro-batch-size must be >= 0 or auto, got {cfg.train.micro_batch_size}")
    if cfg.train.lr_scaling not in LR_SCALINGS:
        problems.append(f"--train.lr-scaling must be one of {', '.join(LR_SCALINGS)}, got {cfg.train.lr_scaling!r}")
    if cfg.train.lr_reference_batch < 0:
        problems.append(f"--train.lr-reference-batch must be >= 0, got {cfg.train.lr_reference_batch}")
    if cfg.train.decay not in ("cosine", "constant"):
        problems.append(f"--train.decay must be cosine or constant, got {cfg.train.decay!r}")
    if cfg.train.optimizer not in ("adamw", "sgd"):
        problems.append(f"--train.optimizer must be adamw or sgd, got {cfg.train.optimizer!r}")
    if cfg.ddp.comm_hook not in ("none", "bf16", "powersgd"):
        problems.append(f"--ddp.comm-hook must be none, bf16 or powersgd, got {cfg.ddp.comm_hook!r}")
    if cfg.ddp.powersgd_rank < 1:
        problems.append(f"--ddp.powersgd-rank must be >= 1, got {cfg.ddp.powersgd_rank}")
    compile_mode = COMPILE_ALIASES.get(cfg.ddp.compile.strip().lower(), cfg.ddp.compile)
    if compile_mode not in COMPILE_MODES:
        problems.append(f"--ddp.compile must be auto, on or off (or true/false), got {cfg.ddp.compile!r}")
    else:
        cfg.ddp.compile = compile_mode
    if cfg.ddp.autocast not in ("auto", "bf16", "fp16", "off"):
        problems.append(f"--ddp.autocast must be auto, bf16, fp16 or off, got {cfg.ddp.autocast!r}")
    if cfg.train.fused not in ("auto", "on", "off"):
        problems.append(f"--train.fused must be auto, on or off, got {cfg.train.fused!r}")
    if cfg.data.workers < -1:
        problems.append(f"--data.workers must be >= 0, or -1 for the device's default, got {cfg.data.workers}")
    if cfg.metrics.peak_tflops < 0:
        problems.append(f"--metrics.peak-tflops must be >= 0, got {cfg.metrics.peak_tflops}")
    if cfg.checkpoint.format not in ("auto", "file", "dcp"):
        problems.append(f"--checkpoint.format must be auto, file or dcp, got {cfg.checkpoint.format!r}")
    if cfg.checkpoint.keep < 1:
        problems.append(f"--checkpoint.keep must be >= 1, got {cfg.checkpoint.keep}")
    if not 0 <= cfg.metrics.port <= 65535:
        problems.append(f"--metrics.port must be in 0..65535, got {cfg.metrics.port}")
    if problems:
        raise ConfigError("; ".join(problems))
