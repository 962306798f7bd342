"""The status type (status.py) and the CRD's status schema describe the same object: the same fields, each with
the same JSON type, nested objects included. And the type is enforced: mypy refuses a misspelt status field."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from ddpjob_operator.state.status import JobStatus

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "ddpjob.dev_ddpjobs.yaml"


def crd_status_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["status"]


def json_type(hint) -> str:
    """The OpenAPI type a Python annotation stands for."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return {type(v) for v in typing.get_args(hint)} == {str} and "string" or "?"
    if origin is list:
        return "array"
    if origin is dict:
        return "object"
    if typing.is_typeddict(hint):
        return "object"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(hint, repr(hint))


def compare(hint, schema: dict, where: str) -> list[str]:
    """Every difference between a TypedDict and an object schema, as readable lines."""
    fields = typing.get_type_hints(hint)
    properties = schema.get("properties") or {}
    problems = [f"{where}.{name}: in the CRD, not in {hint.__name__}" for name in properties.keys() - fields.keys()]
    problems += [f"{where}.{name}: in {hint.__name__}, not in the CRD" for name in fields.keys() - properties.keys()]
    for name in sorted(fields.keys() & properties.keys()):
        field, prop = fields[name], properties[name]
        if json_type(field) != prop.get("type"):
            problems.append(f"{where}.{name}: {json_type(field)} in {hint.__name__}, {prop.get('type')} in the CRD")
        elif typing.is_typeddict(field):
            problems += compare(field, prop, f"{where}.{name}")
        elif typing.get_origin(field) is list:
            (item,) = typing.get_args(field)
            problems += compare(item, prop["items"], f"{where}.{name}[]")
    return problems


def test_the_status_type_is_the_crd_status_schema():
    assert compare(JobStatus, crd_status_schema(), "status") == []


def test_the_comparison_sees_a_difference():
    schema = crd_status_schema()
    schema["properties"]["replicas"]["type"] = "string"
    schema["properties"]["lastFailure"]["properties"].pop("exitCode")
    schema["properties"]["extra"] = {"type": "string"}
    assert sorted(compare(JobStatus, schema, "status")) == [
        "status.extra: in the CRD, not in JobStatus",
        "status.lastFailure.exitCode: in LastFailure, not in the CRD",
        "status.replicas: integer in JobStatus, string in the CRD",
    ]


@pytest.mark.parametrize(
    "line, wrong",
    [
        ('status["replcias"] = 2', "replcias"),
        ('status["attempt"] = "2"', "attempt"),
    ],
)
def test_mypy_refuses_a_wrong_status_field(tmp_path, line, wrong):
    source = tmp_path / "uses_status.py"
    source.write_text(
        "from ddpjob_operator.state.status import JobStatus\n\n\n"
        f"def touch(status: JobStatus) -> None:\n    {line}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(source)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert result.returncode == 1 and wrong in result.stdout, result.stdout + result.stderr
