"""`kubectl ddpj`: the entry point (kubectl runs `kubectl-ddpj` from PATH with the words after `ddpj`). Exit codes:
0 done (watch: the job Succeeded), 1 the job Failed (watch, run), 2 bad input or no access (a clear message on
stderr), 130 interrupted."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, NoReturn

import yaml  # type: ignore[import-untyped]  # pyyaml ships no stubs
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from rich.console import Console
from rich.live import Live

from .. import api
from . import history, view, why
from .logs import Follower, list_pods
from .manifest import BadInput, job_manifest

USAGE_ERROR = 2


class Kube:
    """The API clients and the namespace, from the kubeconfig as kubectl reads it (--kubeconfig, $KUBECONFIG,
    ~/.kube/config; --context), or the pod's service account inside a cluster."""

    def __init__(self, a: argparse.Namespace):
        try:
            config.load_kube_config(config_file=a.kubeconfig, context=a.context)
            _, active = config.list_kube_config_contexts(config_file=a.kubeconfig)
            if a.context:
                contexts, _ = config.list_kube_config_contexts(config_file=a.kubeconfig)
                active = next((c for c in contexts if c["name"] == a.context), active)
            default_ns = (active or {}).get("context", {}).get("namespace") or "default"
        except config.ConfigException as e:
            try:
                config.load_incluster_config()
                default_ns = "default"
            except config.ConfigException:
                fail(f"no cluster to talk to: {e} (set --kubeconfig or $KUBECONFIG)")
        self.namespace: str = a.namespace or default_ns
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()

    def job(self, name: str) -> dict[str, Any]:
        try:
            return self.custom.get_namespaced_custom_object(api.GROUP, api.VERSION, self.namespace, api.PLURAL, name)
        except ApiException as e:
            if e.status == 404:
                self._served()
                fail(
                    f'ddpjob "{name}" not found in namespace "{self.namespace}" (kubectl get ddpj -n {self.namespace})'
                )
            self.api_error(e, f'ddpjob "{name}"')

    def _served(self) -> None:
        """Whether the cluster serves DDPJobs at all: a 404 of the group means no CRD, not a missing job."""
        try:
            self.custom.get_api_resources(api.GROUP, api.VERSION)
        except ApiException as e:
            if e.status == 404:
                fail(
                    f"this cluster does not serve {api.PLURAL}.{api.GROUP}/{api.VERSION}: install the operator "
                    "and its CRD first (helm install ddpjob-operator charts/ddpjob-operator, docs/chart.md)"
                )
            raise

    def api_error(self, e: ApiException, what: str) -> NoReturn:
        if e.status == 403:
            fail(f'no access to {what} in namespace "{self.namespace}": {_api_message(e)}')
        if e.status == 404:
            self._served()
        fail(f"{what}: the API server answered {e.status} {e.reason}: {_api_message(e)}")

    def pods(self, job: str) -> list[dict[str, Any]]:
        return list_pods(self.core, self.namespace, job)


def _api_message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body).get("message") or e.reason)
    except (TypeError, ValueError):
        return str(e.reason)


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    print(f"kubectl ddpj: {message}", file=sys.stderr)
    raise SystemExit(code)


def console() -> Console:
    # Wide when piped, so a line per update stays one line in a CI log.
    return Console() if sys.stdout.isatty() else Console(width=250, soft_wrap=True)


def cmd_watch(kube: Kube, a: argparse.Namespace) -> int:
    out = console()
    job = kube.job(a.job)
    if out.is_terminal:
        with Live(view.panel(view.facts(job)), console=out, refresh_per_second=4) as live:
            while view.exit_code(view.facts(job)["phase"]) is None:
                time.sleep(a.interval)
                job = kube.job(a.job)
                live.update(view.panel(view.facts(job)))
    else:
        last = ""
        while True:
            line = view.plain_line(view.facts(job))
            if line != last:
                print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)
                last = line
            if view.exit_code(view.facts(job)["phase"]) is not None:
                break
            time.sleep(a.interval)
            job = kube.job(a.job)
    f = view.facts(job)
    code = view.exit_code(f["phase"]) or 0
    if code:
        answer = why.explain(job, kube.pods(a.job))
        print(f"{a.job} {f['phase']}: {answer.reason}", file=sys.stderr)
    return code


def cmd_logs(kube: Kube, a: argparse.Namespace) -> int:
    kube.job(a.job)  # a clear error for an unknown job before any stream
    try:
        Follower(
            kube.core,
            kube.custom,
            kube.namespace,
            a.job,
            rank=a.rank,
            attempt=a.attempt,
            since_seconds=_seconds(a.since),
            follow=a.follow,
            out=lambda text: print(text, flush=True),
        ).run()
    except ApiException as e:
        kube.api_error(e, f"the pods of ddpjob {a.job}")
    return 0


def _seconds(text: str | None) -> int | None:
    """--since 30s, 5m, 2h (as kubectl logs takes it)."""
    if not text:
        return None
    units = {"s": 1, "m": 60, "h": 3600}
    if text[-1] not in units or not text[:-1].isdigit():
        fail(f"--since takes a duration such as 30s, 5m or 2h, got {text!r}")
    return int(text[:-1]) * units[text[-1]]


def cmd_history(kube: Kube, a: argparse.Namespace) -> int:
    job = kube.job(a.job)
    out = console()
    if not history.rows(job):
        out.print(f"{a.job}: no restarts or failures recorded (phase {view.facts(job)['phase']})")
        return 0
    out.print(history.table(job))
    return 0


def cmd_why(kube: Kube, a: argparse.Namespace) -> int:
    job = kube.job(a.job)
    workload, ahead = _workload(kube, job)
    try:
        pods = kube.pods(a.job)
    except ApiException as e:
        kube.api_error(e, f"the pods of ddpjob {a.job}")
    answer = why.explain(job, pods, workload, ahead)
    print(f"{a.job}: {answer.reason}")
    for line in answer.evidence:
        if line:
            print(f"  - {line}")
    return 0


def _workload(kube: Kube, job: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The Kueue Workload that owns the job's admission, and the others of its LocalQueue ahead of it (holding
    quota, or queued earlier). None where Kueue is not installed or the job has no queue label."""
    if not (job["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name"):
        return None, []
    try:
        listed = kube.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", kube.namespace, "workloads")
    except ApiException:
        try:
            listed = kube.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", kube.namespace, "workloads")
        except ApiException:
            return None, []
    uid = job["metadata"]["uid"]
    items = listed.get("items") or []
    mine = next(
        (w for w in items if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])), None
    )
    if mine is None:
        return None, []
    queue = (mine.get("spec") or {}).get("queueName")
    created = mine["metadata"].get("creationTimestamp") or ""
    ahead = [
        w
        for w in items
        if w is not mine
        and (w.get("spec") or {}).get("queueName") == queue
        and not why.has_condition(w, "Finished")
        and (why.has_condition(w, "Admitted") or (w["metadata"].get("creationTimestamp") or "") <= created)
    ]
    return mine, ahead


def cmd_run(kube: Kube | None, a: argparse.Namespace) -> int:
    try:
        manifest = job_manifest(a)
    except BadInput as e:
        fail(str(e))
    if a.dry_run:
        if kube is not None:
            manifest["metadata"].setdefault("namespace", kube.namespace)
        print(
            json.dumps(manifest, indent=2) if a.output == "json" else yaml.safe_dump(manifest, sort_keys=False), end=""
        )
        return 0
    assert kube is not None
    try:
        kube.custom.create_namespaced_custom_object(api.GROUP, api.VERSION, kube.namespace, api.PLURAL, manifest)
    except ApiException as e:
        if e.status == 409:
            fail(f'ddpjob "{a.name}" already exists in namespace "{kube.namespace}": delete it or choose another name')
        if e.status == 422:
            fail(f"the API server refused the job: {_api_message(e)}")
        kube.api_error(e, "ddpjobs")
    print(f"ddpjob.{api.GROUP}/{a.name} created in namespace {kube.namespace}", flush=True)
    if a.no_watch:
        return 0
    a.job = a.name
    return cmd_watch(kube, a)


OUTPUTS = {"run": ["yaml", "json"]}  # the subcommands that print in a format of -o's, and their formats


def kube_flags(sub: bool, outputs: list[str] | None = None) -> argparse.ArgumentParser:
    """The flags kubectl users put anywhere on the line, before or after the subcommand, in each of argparse's forms
    (`-n team`, `-nteam`, `--namespace=team`). The top-level parser and every subcommand take them; a subcommand's
    copy defaults to SUPPRESS, so that it leaves a value given before the subcommand as it is (given in both places,
    the later one wins, as in kubectl). -A and -o are read everywhere, so that where they do not apply the message
    says so (parse) wherever they stand."""
    flags = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS if sub else None
    flags.add_argument("-n", "--namespace", default=unset, help="the job's namespace (default: the context's)")
    flags.add_argument("--kubeconfig", default=unset, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    flags.add_argument("--context", default=unset, help="kubeconfig context")
    flags.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=argparse.SUPPRESS if sub else False,
        help=argparse.SUPPRESS,  # every subcommand names one job, in one namespace
    )
    formats = outputs or list(dict.fromkeys(f for fs in OUTPUTS.values() for f in fs))
    flags.add_argument(
        "-o",
        "--output",
        choices=formats,
        default=unset,
        help=(
            argparse.SUPPRESS
            if sub and not outputs
            else f"{'--dry-run' if sub else 'run --dry-run'}'s format (default {formats[0]})"
        ),
    )
    return flags


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl ddpj",
        description="Follow DDPJobs from a terminal (docs/cli.md).",
        parents=[kube_flags(sub=False)],
    )
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[kube_flags(sub=True, outputs=OUTPUTS.get(name))], help=help)

    w = command("watch", "live view until the job ends; exit 0 Succeeded, 1 Failed")
    w.add_argument("job")
    w.add_argument("--interval", type=float, default=1.0, help="seconds between reads (default 1)")

    lg = command("logs", "every rank's lines, merged and prefixed")
    lg.add_argument("job")
    lg.add_argument("-f", "--follow", action="store_true", help="follow across attempts and replaced pods")
    lg.add_argument("--rank", type=int, help="only this global rank's lines")
    lg.add_argument("--attempt", type=int, help="only this attempt's pods")
    lg.add_argument("--since", help="only lines newer than this (30s, 5m, 2h)")

    h = command("history", "one row per restart or failure, from status")
    h.add_argument("job")

    y = command("why", "why the job is not Running, with the evidence")
    y.add_argument("job")

    r = command("run", "write a DDPJob from flags and watch it")
    r.add_argument("name")
    r.add_argument("--image", required=True, help="the trainer image (it has python, torch and ddp_trainer)")
    r.add_argument("-m", "--module", help="python module to run under torchrun (e.g. ddp_trainer)")
    r.add_argument("--script", help="a script path inside the image to run under torchrun")
    r.add_argument("--replicas", type=int, default=1, help="pods (torchrun nodes), default 1")
    r.add_argument("--nproc-per-node", type=int, default=1, help="processes per pod, default 1")
    r.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu per pod, default 0 (CPU, gloo)")
    r.add_argument("--min-replicas", type=int, help="elastic: the fewest pods to run at")
    r.add_argument("--max-replicas", type=int, help="elastic: the most pods to grow to")
    r.add_argument("--queue", help="Kueue LocalQueue (the kueue.x-k8s.io/queue-name label)")
    r.add_argument("--backoff-limit", type=int, default=3, help="restarts after the trainer's own failures")
    r.add_argument("--restart-strategy", choices=["Recreate", "InPlace"], default="InPlace")
    r.add_argument("--rendezvous-port", type=int, help="torchrun's store port (jobs sharing one node need their own)")
    r.add_argument("--node-selector", action="append", metavar="KEY=VALUE", help="pod nodeSelector (repeatable)")
    r.add_argument("--toleration", action="append", metavar="KEY", help="tolerate taint KEY (repeatable)")
    r.add_argument("--dry-run", action="store_true", help="print the manifest instead of creating it")
    r.add_argument("--no-watch", action="store_true", help="create it and return")
    r.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    r.epilog = (
        "After --: the arguments of -m MODULE or --script PATH, or without them the command, "
        "python -m MODULE [ARGS] or python PATH [ARGS] (torchrun starts it in each pod)."
    )
    return top


def parse(words: list[str]) -> argparse.Namespace:
    """The command line, with the words after the first `--` in `args` (run's command or its arguments)."""
    after = words.index("--") if "--" in words else len(words)
    a = parser().parse_args(words[:after])
    a.args = words[after + 1 :]
    if a.all_namespaces:
        fail(f"-A/--all-namespaces does not apply to {a.command}: it names one job, in one namespace (-n NAMESPACE)")
    if a.output and a.command not in OUTPUTS:
        fail(f"-o/--output applies to {', '.join(OUTPUTS)} (with --dry-run), not to {a.command}")
    if a.args and a.command != "run":
        fail(f"{a.command} takes nothing after --, got {' '.join(a.args)!r}")
    return a


COMMANDS = {"watch": cmd_watch, "logs": cmd_logs, "history": cmd_history, "why": cmd_why}


def main(argv: list[str] | None = None) -> int:
    a = parse(list(sys.argv[1:] if argv is None else argv))
    try:
        if a.command == "run":
            return cmd_run(None if a.dry_run and not (a.namespace or a.kubeconfig) else Kube(a), a)
        return COMMANDS[a.command](Kube(a), a)
    except KeyboardInterrupt:
        return 130
    except ApiException as e:
        fail(f"the API server answered {e.status} {e.reason}: {_api_message(e)}")
    except OSError as e:  # urllib3's connection errors are OSErrors underneath
        fail(f"cannot reach the cluster: {e}")


if __name__ == "__main__":
    sys.exit(main())
