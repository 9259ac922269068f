# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""The epoch row times whole epochs, never an error path.

The agent's epoch never raises: it logs what failed and goes on. The row
once timed an epoch failing on a missing hypervisor for months (3 ms
against a 1 ms goal); these tests break each part the epoch needs and
expect the bench to stop.
"""

import pytest

from bench import bench_agent
from bench import bench_goals
from bench import guard
from resex_agent import loop
from resex_libvirt.board import report as report_mod
from resex_libvirt import exceptions
from resex_libvirt.sim import host as host_mod


def test_the_epoch_row_times_epochs_that_built_and_published_their_report(monkeypatch):
    built, sent = [], []
    real_run_epoch = loop.Agent.run_epoch

    def run_epoch(agent):
        real_run_epoch(agent)
        built.append(agent.last_report)

    monkeypatch.setattr(loop.Agent, "run_epoch", run_epoch)
    real_publish = bench_agent._MemoryBoard.publish
    monkeypatch.setattr(bench_agent._MemoryBoard, "publish",
                        lambda board, report: sent.append(report) or real_publish(board, report))
    total, market, report = bench_agent._epoch_work(8, 2, "io_shares")
    assert total > market > 0 and total > report > 0
    assert [r.epoch for r in built] == [0, 1, 2, 3]
    assert all(r.vms == 8 and r.state == report_mod.CONTROLLING for r in built)
    assert sent and sent[-1] is built[-1]


def test_an_epoch_whose_hypervisor_fails_stops_the_bench(monkeypatch):
    def vcpu_times(host):
        raise exceptions.HypervisorError("libvirt went away")

    monkeypatch.setattr(host_mod.SimHost, "vcpu_times", vcpu_times)
    with pytest.raises(guard.ErrorPath, match="libvirt went away"):
        bench_agent.epoch_work_us(8, epochs=1)


def test_an_epoch_without_a_hypervisor_stops_the_bench(monkeypatch):
    """The error path the row once timed: no hypervisor for the run delays."""
    real_build = bench_agent.build

    def build(*args, **kwargs):
        agent = real_build(*args, **kwargs)
        agent.hypervisor = None
        return agent

    monkeypatch.setattr(bench_agent, "build", build)
    with pytest.raises(guard.ErrorPath,
                       match="epoch 0 at 8 VMs logged 1 record.s. at WARNING .*host report"):
        bench_agent.epoch_work_us(8, epochs=1)


def test_an_epoch_that_fails_without_a_word_stops_the_bench(monkeypatch):
    def from_summary(*args, **kwargs):
        raise ValueError("no report")

    monkeypatch.setattr(report_mod.HostReport, "from_summary", from_summary)
    monkeypatch.setattr(loop.LOG, "exception", lambda *args, **kwargs: None)
    with pytest.raises(guard.ErrorPath, match="built no controlling host report"):
        bench_agent.epoch_work_us(8, epochs=1)


def test_the_goals_table_takes_its_epoch_row_from_the_guarded_bench(monkeypatch, capsys):
    seen = []

    def epoch_work_us(n_vms, *args, **kwargs):
        seen.append(n_vms)
        raise guard.ErrorPath("epoch 1 at %d VMs built no controlling host report" % n_vms)

    monkeypatch.setattr(bench_goals, "machine_pace", lambda: (1.0, 1.0))
    monkeypatch.setattr(bench_goals, "agent_step_us", lambda *args: 1.0)
    monkeypatch.setattr(bench_goals, "sim_interval_us", lambda *args: 1.0)
    monkeypatch.setattr(bench_agent, "epoch_work_us", epoch_work_us)
    with pytest.raises(guard.ErrorPath):
        bench_goals.main(["--runs", "1", "--skip-paper", "--skip-nova"])
    assert seen == [1024]
    assert "epoch work" not in capsys.readouterr().out
