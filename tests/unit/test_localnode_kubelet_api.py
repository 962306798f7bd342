"""The local node's kubelet API (`kubectl logs`): a client that hangs up is routine and goes to the agent's log at
debug level; anything else is a warning with its traceback there. Neither is printed on stderr, where the stdlib's
server would print it into whatever started the agent (a test run's output)."""

from __future__ import annotations

import logging
import ssl

import pytest

from ddpjob_localnode.kubelet_api import _Server


def handled(exc: BaseException, caplog, capsys) -> tuple[list[logging.LogRecord], str]:
    server = _Server.__new__(_Server)  # handle_error reads no state of a bound server
    with caplog.at_level(logging.DEBUG, logger="ddpjob_localnode.kubelet_api"):
        try:
            raise exc
        except BaseException:  # noqa: BLE001 (as socketserver calls it: inside the except block)
            server.handle_error(None, ("127.0.0.1", 40000))
    return caplog.records, capsys.readouterr().err


@pytest.mark.parametrize("exc", [BrokenPipeError(), ConnectionResetError(), ssl.SSLEOFError(), TimeoutError()])
def test_a_client_that_hangs_up_is_a_debug_line(exc, caplog, capsys):
    records, err = handled(exc, caplog, capsys)
    assert [r.levelno for r in records] == [logging.DEBUG] and "went away" in records[0].getMessage()
    assert err == ""


def test_another_error_is_a_warning_with_its_traceback(caplog, capsys):
    records, err = handled(ValueError("bad tailLines"), caplog, capsys)
    assert [r.levelno for r in records] == [logging.WARNING]
    assert records[0].exc_info is not None and "bad tailLines" in str(records[0].exc_info[1])
    assert err == ""
