"""The fuzz regressions that must be rejected at apply time, checked directly (server-side dry run, no operator):
fast, so a CRD change that reopens one fails here even when the fuzz run does not draw it."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recorder import GROUP, PLURAL, VERSION
from test_fuzzed_specs import manifest, regression_examples

REJECTED = [case for case in regression_examples() if case.get("rejected")]


@pytest.mark.parametrize("case", REJECTED, ids=[case["name"][:20] for case in REJECTED])
def test_regression_is_rejected_naming_the_field(api, crds, namespace, case):
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest(case["name"], case["spec"]),
                                               dry_run="All")
    assert refused.value.status == 422
    assert case["rejected"] in json.loads(refused.value.body)["message"]


def test_the_longest_allowed_name_is_accepted(api, crds, namespace):
    custom = client.CustomObjectsApi(api)
    spec = REJECTED[0]["spec"]
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest("f" * 51, spec), dry_run="All")
