"""What to run for one container, computed from the pod alone: argv, env, working folder and the local folders
that stand in for its volumes. Paths inside the container (mountPaths, the termination-log path) do not exist
on this machine, so any command/args/env value that starts with one is rewritten to the mapped local path."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .env_expansion import container_env, expand

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
# A container does not inherit the host's environment; these few keep Python and the shell working.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LaunchError(ValueError):
    """The pod cannot be run in local mode; the message goes to the container status and an event."""


@dataclass(frozen=True)
class LaunchPlan:
    container: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    termination_log: Path
    log_file: Path
    folders: list[Path] = field(default_factory=list)


def volume_folders(pod: dict, pod_dir: Path, hostpath_root: Path) -> dict[str, Path]:
    """Volume name -> local folder. emptyDir lives and dies with the pod; hostPath is shared by every pod on
    the node (as on a real node), under the agent's state dir rather than at the real host path."""
    folders: dict[str, Path] = {}
    for volume in pod.get("spec", {}).get("volumes") or []:
        name = volume["name"]
        if "hostPath" in volume:
            folders[name] = hostpath_root / volume["hostPath"]["path"].lstrip("/")
        else:
            folders[name] = pod_dir / "volumes" / name
    return folders


def path_map(container: dict, volumes: Mapping[str, Path], termination_log: Path) -> dict[str, str]:
    """Container path -> local path, for the mounts and the termination-log file."""
    mapping: dict[str, str] = {}
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in volumes:
            raise LaunchError(f"volumeMount {mount['mountPath']} refers to unknown volume {mount['name']!r}")
        local = volumes[mount["name"]] / mount.get("subPath", "")
        mapping[mount["mountPath"].rstrip("/") or "/"] = str(local).rstrip("/")
    mapping[container.get("terminationMessagePath") or DEFAULT_TERMINATION_LOG] = str(termination_log)
    return mapping


def rewrite_path(value: str, mapping: Mapping[str, str]) -> str:
    """Rewrite every container path in `value` that stands as a path of its own: at the start, or after a
    space, `=`, `:` or a quote (`--dir=/ckpt/x`, `sh -c "echo x > /dev/termination-log"`), and followed by
    `/`, the end, a space, `:`, `;` or a quote. `/ckptx` or `http://host/ckpt` are left alone."""
    if not mapping:
        return value
    inside = "|".join(re.escape(p) for p in sorted(mapping, key=len, reverse=True))
    pattern = re.compile(rf"(?:(?<=^)|(?<=[\s=:'\"]))({inside})(?=$|[/\s:;'\"])")
    return pattern.sub(lambda m: mapping[m.group(1)], value)


def build_launch_plan(
    pod: dict,
    container: dict,
    pod_dir: Path,
    hostpath_root: Path,
    venv_bin: Path,
    lookup_key: Callable[[str, str, str, str], str | None] | None = None,
) -> LaunchPlan:
    name = container["name"]
    command = list(container.get("command") or [])
    if not command:
        raise LaunchError(
            f"container {name!r} has no command: local mode runs processes, not images, so the image's "
            f"ENTRYPOINT ({container.get('image', '?')}) is unknown; set command explicitly"
        )
    work = pod_dir / "containers" / name
    termination_log = work / "termination-log"
    volumes = volume_folders(pod, pod_dir, hostpath_root)
    mapping = path_map(container, volumes, termination_log)
    base = {
        "PATH": f"{venv_bin}:{BASE_PATH}",
        "HOME": "/root",
        "HOSTNAME": pod.get("spec", {}).get("hostname") or pod["metadata"]["name"],
        "VIRTUAL_ENV": str(venv_bin.parent),
        # Output reaches `kubectl logs` as it is printed rather than when a buffer fills.
        "PYTHONUNBUFFERED": "1",
        # One intra-op thread per process unless the pod's env says otherwise: every local node's processes share
        # this machine's cores, where a real node's container has its own (the trainer sizes its threads from its
        # cgroup's CPU limit, which no process here has). Oversubscribed, OpenMP's spinning threads took 10x the
        # time for a digits run on the 2-core VM (docs/trainer.md).
        "OMP_NUM_THREADS": "1",
    }
    try:
        env = container_env(pod, container, base, lookup_key)
    except ValueError as err:
        raise LaunchError(str(err)) from err
    env = {key: rewrite_path(value, mapping) for key, value in env.items()}
    argv = [rewrite_path(expand(part, env), mapping) for part in command + list(container.get("args") or [])]
    mount_folders = [Path(local) for inside, local in mapping.items() if local != str(termination_log)]
    cwd = Path(rewrite_path(container["workingDir"], mapping)) if container.get("workingDir") else work
    return LaunchPlan(
        container=name,
        argv=argv,
        env=env,
        cwd=cwd,
        termination_log=termination_log,
        log_file=pod_dir / "logs" / f"{name}.log",
        folders=sorted({*volumes.values(), *mount_folders, work, cwd, termination_log.parent}),
    )
