"""kubectl ddpj's command line, through main() with the cluster calls replaced: the flags kubectl users put anywhere
(-n/--namespace, --context, --kubeconfig, -A, -o) before or after the subcommand, in each of their forms, and
`run ... -- python -m MODULE ARGS` (the command after --, as `kubectl run` and `ray job submit` take it) written
into the same trainer command as `-m MODULE -- ARGS`. Bad input exits 2 with its message on stderr."""

from __future__ import annotations

import argparse
import json

import pytest

from ddpjob_operator.cli import main

RUN = ["run", "j", "--image", "img"]


def parsed(monkeypatch, words: list[str]) -> argparse.Namespace:
    """What the subcommand would be called with (its Kube is not built: no cluster)."""
    seen: list[argparse.Namespace] = []

    def record(kube, a):
        seen.append(a)
        return 0

    monkeypatch.setattr(main, "Kube", lambda a: None)
    monkeypatch.setattr(main, "COMMANDS", dict.fromkeys(("watch", "logs", "history", "why"), record))
    monkeypatch.setattr(main, "cmd_run", record)
    assert main.main(words) == 0
    return seen[0]


NS = {"namespace": "team", "context": None, "kubeconfig": None}


@pytest.mark.parametrize("words, want", [
    # -n/--namespace before and after the subcommand, in each form argparse and kubectl take
    (["-n", "team", "watch", "job"], {"command": "watch", "job": "job", **NS}),
    (["watch", "job", "-n", "team"], {"command": "watch", "job": "job", **NS}),
    (["-nteam", "watch", "job"], NS),
    (["watch", "job", "-nteam"], NS),
    (["-n=team", "watch", "job"], NS),
    (["--namespace", "team", "why", "job"], NS),
    (["why", "--namespace", "team", "job"], NS),
    (["--namespace=team", "history", "job"], NS),
    (["history", "job", "--namespace=team"], NS),
    (["-n", "team", "logs", "job", "-f"], {"command": "logs", "follow": True, **NS}),
    (["logs", "job", "-f", "-n", "team", "--rank", "1"], {"follow": True, "rank": 1, **NS}),
    # --context and --kubeconfig, both positions, both forms
    (["--context", "kind-a", "watch", "job"], {"context": "kind-a", "namespace": None}),
    (["watch", "job", "--context=kind-a"], {"context": "kind-a", "namespace": None}),
    (["--kubeconfig=/k", "why", "job"], {"kubeconfig": "/k"}),
    (["why", "job", "--kubeconfig", "/k"], {"kubeconfig": "/k"}),
    # one before and another after: both kept; the same flag twice: the later wins, as in kubectl
    (["--context", "c", "watch", "job", "-n", "team"], {"context": "c", "namespace": "team"}),
    (["-n", "a", "watch", "job", "-n", "b"], {"namespace": "b"}),
    (["watch", "job"], {"namespace": None, "context": None, "kubeconfig": None, "all_namespaces": False}),
    # -o where the subcommand has it (run --dry-run), before or after it
    (["-o", "json", *RUN, "-m", "t", "--dry-run"], {"command": "run", "output": "json", "dry_run": True}),
    (["--output=json", *RUN, "-m", "t", "--dry-run"], {"output": "json"}),
    ([*RUN, "-m", "t", "--dry-run", "-ojson"], {"output": "json"}),
    ([*RUN, "-m", "t", "--dry-run", "--output", "yaml"], {"output": "yaml"}),
    (["-n", "team", *RUN, "-m", "t", "-o", "json"], {"output": "json", **NS}),
    # the words after -- are run's command (or its module's arguments), flags inside it are not ours
    ([*RUN, "-n", "team", "--", "python", "-m", "train", "-n", "3"],
     {"args": ["python", "-m", "train", "-n", "3"], **NS}),
])
def test_kubectl_flags_are_read_before_or_after_the_subcommand(monkeypatch, words, want):
    a = parsed(monkeypatch, words)
    assert {key: getattr(a, key, "<unset>") for key in want} == want, words


@pytest.mark.parametrize("words, message", [
    # -A applies to no subcommand (each names one job): said so wherever it stands, in each form
    (["-A", "watch", "job"], "-A/--all-namespaces does not apply to watch: it names one job, in one namespace"),
    (["watch", "job", "-A"], "-A/--all-namespaces does not apply to watch"),
    (["--all-namespaces", "logs", "job"], "-A/--all-namespaces does not apply to logs"),
    (["why", "job", "--all-namespaces"], "-A/--all-namespaces does not apply to why"),
    # -o where the subcommand has none
    (["-o", "json", "watch", "job"], "-o/--output applies to run (with --dry-run), not to watch"),
    (["history", "job", "-o", "yaml"], "-o/--output applies to run (with --dry-run), not to history"),
    (["-o", "xml", *RUN, "-m", "t"], "argument -o/--output: invalid choice: 'xml'"),
    ([*RUN, "-m", "t", "-o", "xml"], "argument -o/--output: invalid choice: 'xml'"),
    # a flag without its value, before or after
    (["watch", "job", "-n"], "argument -n/--namespace: expected one argument"),
    (["-n"], "argument -n/--namespace: expected one argument"),
    (["--context"], "argument --context: expected one argument"),
    (["-n", "team"], "the following arguments are required: command"),
    # only run takes words after --
    (["watch", "job", "--", "x"], "watch takes nothing after --, got 'x'"),
])
def test_flags_that_do_not_apply_end_with_their_message(monkeypatch, capsys, words, message):
    with pytest.raises(SystemExit) as ended:
        parsed(monkeypatch, words)
    assert ended.value.code == 2
    assert message in capsys.readouterr().err


def dry_run(capsys, *words: str) -> dict:
    """The manifest `run --dry-run -o json` prints (no cluster: no -n, no --kubeconfig)."""
    assert main.main([*RUN, "--dry-run", "-o", "json", *words]) == 0
    return json.loads(capsys.readouterr().out)


def trainer(manifest: dict) -> dict:
    return manifest["spec"]["template"]["spec"]["containers"][0]


def test_run_takes_python_dash_m_after_dashdash_as_the_trainers_command(capsys):
    container = trainer(dry_run(capsys, "--", "python", "-m", "train", "--lr", "3e-4"))
    # torchrun through the image's entrypoint, as for -m: the operator's PET_* env reaches it
    assert container["command"] == ["python", "-m", "ddp_trainer.torchrun"]
    assert container["args"] == ["--module", "train", "--lr", "3e-4"]
    assert dry_run(capsys, "-m", "train", "--", "--lr", "3e-4") == dry_run(
        capsys, "--", "python", "-m", "train", "--lr", "3e-4"
    )


@pytest.mark.parametrize("command, args", [
    (["python", "-m", "pkg.mod", "a", "b"], ["--module", "pkg.mod", "a", "b"]),
    (["python3", "-mpkg.mod", "a"], ["--module", "pkg.mod", "a"]),
    (["/usr/bin/python3.11", "-u", "-m", "train"], ["--module", "train"]),  # torchrun runs python -u anyway
    (["python", "train.py", "--lr", "3e-4"], ["train.py", "--lr", "3e-4"]),
    (["python", "-u", "/app/train.py", "-m", "x"], ["/app/train.py", "-m", "x"]),  # the script's own -m
])
def test_run_maps_a_python_command_onto_the_launchers_module_or_script(capsys, command, args):
    assert trainer(dry_run(capsys, "--", *command))["args"] == args


@pytest.mark.parametrize("words, message", [
    ([], "give what to run: -m MODULE [-- ARGS], --script PATH [-- ARGS], -- python -m MODULE [ARGS] or -- "
         "python PATH [ARGS]"),
    (["--", "--workload=digits"], "give what to run: -m MODULE [-- ARGS], --script PATH [-- ARGS], -- python -m "
                                  "MODULE [ARGS] or -- python PATH [ARGS]; after -- came arguments "
                                  "('--workload=digits') but no -m or --script"),
    (["-m", "a", "--script", "b.py"], "give one thing to run, -m MODULE or --script PATH, not both"),
    (["--", "torchrun", "train.py"], "the command after -- must be python's (each pod runs it under torchrun"),
    (["--", "./train.sh", "a"], "the command after -- must be python's"),
    (["--", "python"], "after -- python give -m MODULE or a script PATH"),
    (["--", "python", "-m"], "after -- python give -m MODULE or a script PATH"),
    (["--", "python", "-c", "print(1)"], "no other python option reaches it"),
    (["--", "python", "-O", "train.py"], "got 'python -O train.py'"),
])
def test_run_refuses_a_command_the_launcher_cannot_start(capsys, words, message):
    with pytest.raises(SystemExit) as ended:
        main.main([*RUN, "--dry-run", *words])
    assert ended.value.code == 2
    assert message in capsys.readouterr().err
