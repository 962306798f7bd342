"""Several local node agents on one machine (LOCAL_NODES): each its own files, addresses and share of the
machine, and one /etc/hosts that they edit in turn."""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path

import pytest

from ddpjob_localnode.hosts_block import write_block
from ddpjob_localnode.layout import Layout, default_node_name
from ddpjob_localnode.loopback_ips import LoopbackAllocator, block
from ddpjob_localnode.machine import share


@pytest.mark.parametrize("total, nodes, want", [(2, 1, [2]), (2, 3, [1, 1, 0]), (10, 3, [4, 3, 3]), (8, 2, [4, 4])])
def test_shares_add_up_to_the_machine(total, nodes, want):
    shares = [share(total, nodes, i) for i in range(nodes)]
    assert shares == want and sum(shares) == total


def test_agents_get_disjoint_address_blocks():
    blocks = [block(i) for i in range(4)]
    for (a_first, a_last), (b_first, b_last) in zip(blocks, blocks[1:], strict=False):
        assert a_last < b_first or b_last < a_first
    assert str(ipaddress.IPv4Address(blocks[2][0])) == "127.12.0.1"
    assert LoopbackAllocator(2).allocate("pod").startswith("127.12.")
    assert LoopbackAllocator().allocate("pod").startswith("127.0.1.")


def test_each_agent_has_its_own_files_and_name_but_one_hostpath(tmp_path):
    first, third = Layout(tmp_path, default_node_name(0)), Layout(tmp_path, default_node_name(2), index=2)
    assert first.pid_file.name == "local-node.pid" and third.pid_file.name == "local-node-2.pid"
    assert first.state_dir != third.state_dir and first.log_file != third.log_file
    assert first.hostpath_root == third.hostpath_root
    assert third.node_name == default_node_name() + "-2"


def test_concurrent_agents_keep_each_others_hosts_blocks(tmp_path: Path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")

    def agent(owner: str) -> None:
        for i in range(40):
            write_block(hosts, owner, {f"127.0.{i + 1}.1": [f"{owner}-pod-{i}"]})

    threads = [threading.Thread(target=agent, args=(f"node{n}",)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = hosts.read_text()
    assert "127.0.0.1 localhost" in text
    for n in range(3):
        assert f"node{n}-pod-39" in text, text
