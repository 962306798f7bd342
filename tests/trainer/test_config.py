"""Flags and env: every flag also from DDP_TRAINER_*, flags win, bad values name the flag or variable."""

import pytest

from ddp_trainer.config import ConfigError, env_name, flag_name, parse_config


@pytest.mark.parametrize("argv, environ, field, want", [
    ([], {}, ("train", "steps"), 200),
    (["--train.steps", "7"], {}, ("train", "steps"), 7),
    ([], {"DDP_TRAINER_TRAIN_STEPS": "9"}, ("train", "steps"), 9),
    (["--train.steps=7"], {"DDP_TRAINER_TRAIN_STEPS": "9"}, ("train", "steps"), 7),
    (["--checkpoint.dir", "/ck", "--checkpoint.every-steps", "5"], {}, ("checkpoint", "every_steps"), 5),
    ([], {"DDP_TRAINER_CHECKPOINT_DIR": "/ck"}, ("checkpoint", "dir"), "/ck"),
    ([], {"DDP_TRAINER_DDP_SYNC_BATCHNORM": "true"}, ("ddp", "sync_batchnorm"), True),
    (["--ddp.static-graph", "1"], {}, ("ddp", "static_graph"), True),
    (["--ddp.bucket-cap-mb", "50"], {}, ("ddp", "bucket_cap_mb"), 50.0),
    (["--metrics.port", "0"], {"DDP_TRAINER_METRICS_PORT": "9500"}, ("metrics", "port"), 0),
    (["--workload", "gpt"], {"DDP_TRAINER_WORKLOAD": "cnn"}, (None, "workload"), "gpt"),
    ([], {}, ("ddp", "compile"), "auto"),
    (["--train.micro-batch-size", "auto"], {}, ("train", "micro_batch_size"), -1),
    ([], {"DDP_TRAINER_TRAIN_MICRO_BATCH_SIZE": "12"}, ("train", "micro_batch_size"), 12),
    (["--ddp.compile", "off"], {}, ("ddp", "compile"), "off"),
    (["--ddp.compile", "true"], {}, ("ddp", "compile"), "on"),  # the flag's form while it was a boolean
    ([], {"DDP_TRAINER_DDP_COMPILE": "0"}, ("ddp", "compile"), "off"),
    ([], {"DDP_TRAINER_ENTRYPOINT": "pkg.mod:build"}, (None, "entrypoint"), "pkg.mod:build"),
    ([], {}, (None, "peer_timeout_seconds"), 0.0),  # no peer watch unless asked (the operator asks under InPlace)
    ([], {"DDP_TRAINER_PEER_TIMEOUT_SECONDS": "60"}, (None, "peer_timeout_seconds"), 60.0),
])
def test_flags_and_env(argv, environ, field, want):
    cfg = parse_config(argv, environ)
    section, name = field
    assert getattr(getattr(cfg, section) if section else cfg, name) == want


def test_names_follow_one_rule():
    assert flag_name("checkpoint", "every_steps") == "--checkpoint.every-steps"
    assert env_name("checkpoint", "every_steps") == "DDP_TRAINER_CHECKPOINT_EVERY_STEPS"
    assert flag_name(None, "workload") == "--workload"
    assert env_name(None, "workload") == "DDP_TRAINER_WORKLOAD"


@pytest.mark.parametrize("argv, environ, message", [
    ([], {"DDP_TRAINER_TRAIN_STEPS": "ten"}, "env DDP_TRAINER_TRAIN_STEPS: expected int, got 'ten'"),
    (["--train.lr", "fast"], {}, "--train.lr: expected float, got 'fast'"),
    (["--ddp.compile", "maybe"], {}, "--ddp.compile must be auto, on or off (or true/false), got 'maybe'"),
    (["--workload", "resnet"], {}, "--workload must be one of digits, cnn, gpt, got 'resnet'"),
    (["--train.steps", "0"], {}, "--train.steps must be >= 1, got 0"),
    (["--train.grad-accum-steps", "0"], {}, "--train.grad-accum-steps must be >= 1, got 0"),
    (["--train.lr-scaling", "cubic"], {}, "--train.lr-scaling must be one of auto, linear, sqrt, none, got 'cubic'"),
    (["--train.lr-reference-batch", "-1"], {}, "--train.lr-reference-batch must be >= 0, got -1"),
    (["--train.micro-batch-size", "-2"], {}, "--train.micro-batch-size must be >= 0 or auto, got -2"),
    (["--train.micro-batch-size", "big"], {}, "--train.micro-batch-size: expected an int or auto, got 'big'"),
    (["--train.decay", "step"], {}, "--train.decay must be cosine or constant, got 'step'"),
    (["--train.optimizer", "lamb"], {}, "--train.optimizer must be adamw or sgd, got 'lamb'"),
    (["--ddp.comm-hook", "fp8"], {}, "--ddp.comm-hook must be none, bf16 or powersgd, got 'fp8'"),
    (["--ddp.autocast", "fp8"], {}, "--ddp.autocast must be auto, bf16, fp16 or off, got 'fp8'"),
    (["--ddp.powersgd-rank", "0"], {}, "--ddp.powersgd-rank must be >= 1, got 0"),
    (["--train.fused", "yes"], {}, "--train.fused must be auto, on or off, got 'yes'"),
    (["--data.workers", "-2"], {}, "--data.workers must be >= 0, or -1 for the device's default, got -2"),
    (["--metrics.peak-tflops", "-1"], {}, "--metrics.peak-tflops must be >= 0, got -1.0"),
    (["--checkpoint.keep", "0"], {}, "--checkpoint.keep must be >= 1, got 0"),
    (["--peer-timeout-seconds", "-5"], {}, "--peer-timeout-seconds must be >= 0 (0: no watch), got -5.0"),
    (["--metrics.port", "70000"], {}, "--metrics.port must be in 0..65535, got 70000"),
    (["--train.batch-size-per-rank", "0"], {}, "--train.global-batch-size must be > 0, or --train.batch-size-per-rank >= 1"),
])
def test_bad_values_name_the_flag_or_variable(argv, environ, message):
    with pytest.raises(ConfigError) as e:
        parse_config(argv, environ)
    assert message in str(e.value)


def test_unknown_flag_is_a_config_error_that_names_it():
    """A ConfigError, not argparse's SystemExit: main() records it in the error file (the termination log)."""
    with pytest.raises(ConfigError) as e:
        parse_config(["--train.stepz", "3"], {})
    assert "unrecognized arguments: --train.stepz" in str(e.value)


def test_entrypoint_lifts_the_workload_check():
    assert parse_config(["--workload", "custom", "--entrypoint", "m:f"], {}).entrypoint == "m:f"
