"""The chaos suites' reading of the operator's log: which failed passes are the injected outage and which are
bugs. Pure: log lines as the work queue writes them."""

from __future__ import annotations

import pytest

from chaos_run import unexpected_errors


def failed_pass(error: str) -> str:
    return (f'time=2026-11-23T19:37:27 level=warning logger=ddpjob.workqueue msg="reconcile of (\'ns\', \'a11\') '
            f'failed ({error}); retrying in 0.5s"')


@pytest.mark.parametrize("error", [
    "MaxRetryError: HTTPSConnectionPool(host='127.0.0.1', port=26443): Max retries exceeded",
    "ServiceException: (503)\\nReason: Service Unavailable\\nHTTP response body: apiserver is shutting down",
])
def test_the_outage_is_not_an_operator_error(error):
    assert unexpected_errors(failed_pass(error)) == []


@pytest.mark.parametrize("error, name", [
    ("ServiceException: (500)\\nReason: Internal Server Error", "ServiceException"),
    ("KeyError: 'status'", "KeyError"),
    ("ApiException: (422)\\nReason: Unprocessable Entity", "ApiException"),
])
def test_a_bug_or_another_refusal_is(error, name):
    assert unexpected_errors(failed_pass(error)) == [name]
