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

"""The agent's own work at the end of an epoch, at host scale.

Every epoch the agent closes the market's epoch (replenish, per-VM tallies),
builds the host report once, logs its summary line (at INFO, through a
real handler), hands the report to the background publisher and feeds one
epoch record to the Prometheus sink. :func:`epoch_work_us` times exactly
that (:meth:`agent.loop.Agent.run_epoch`) on a real market with the IOShares
policy, half the VMs latency-sensitive, after one epoch of synthetic
intervals; the board is an in-memory one (the publisher's thread sends the
report off the loop, so the loop's cost is the hand-over).

Goal: at most 1 ms at 1024 VMs (one interval of the paper's 1 ms
interval). Times are the loop thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``),
so that other processes on a loaded machine do not inflate them and the
publisher thread's work (off the loop) is not billed to it.
``python -m bench.bench_agent [--vms 64,256,1024]`` prints the medians; the
``make bench`` table calls :func:`epoch_work_us`.
"""

import argparse
import gc
import io
import logging
import statistics
import time

from agent import clock as clock_mod
from agent import loop
from agent import metrics as metrics_mod
from resex_libvirt import control
from resex_libvirt.hypervisor import base as hyp_base
from resex_libvirt import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from resex_libvirt import sla as sla_mod

INTERVALS_PER_EPOCH = 10


class _MemoryBoard:
    """A board that keeps the last report (the bench times the loop, not a store)."""

    last = None

    def publish(self, report):
        self.last = report

    def count(self):
        return 1

    def close(self):
        pass


def build(n_vms, policy="io_shares"):
    """An :class:`agent.loop.Agent` holding ``n_vms`` VMs, with board and metrics sink."""
    params = market_mod.MarketParams(interval_s=0.001, intervals_per_epoch=INTERVALS_PER_EPOCH,
                                     pcpus=max(1, n_vms))
    market = market_mod.Market(params, policy_mod.load(policy))
    settings = loop.LoopSettings(host="bench", interval_s=0.001,
                                 intervals_per_epoch=INTERVALS_PER_EPOCH,
                                 background_publish=True)
    agent = loop.Agent(settings, market, None, None, board=_MemoryBoard(),
                       clock=clock_mod.RealClock(),
                       metrics=metrics_mod.PrometheusMetrics("127.0.0.1", 0))  # never started
    for i in range(n_vms):
        uuid = "00000000-0000-4000-8000-%012d" % i
        vm_sla = sla_mod.SLA(latency_sla_us=200.0) if i % 2 == 0 else sla_mod.SLA()
        info = hyp_base.VMInfo(uuid=uuid, name="vm-%04d" % i, sla=vm_sla)
        agent.vms[uuid] = control.VMRecord(info=info)
        market.add(records.VMSpec(vm=uuid, sla=vm_sla))
    return agent


def _intervals(agent, k):
    uuids = list(agent.vms)
    for j in range(INTERVALS_PER_EPOCH):
        samples = {u: records.Sample(u, 0.001, 20.0 + (i * 7 + j + k) % 60, 64 * 1024 * (i % 5),
                                     64 * (i % 5))
                   for i, u in enumerate(uuids)}
        windows = {u: records.LatencyWindow(16, 200.0 + (i % 9) * 10.0, 5.0, 300.0)
                   for i, u in enumerate(uuids[::2])}
        agent.market.step(samples, windows)


def epoch_work_us(n_vms, epochs=15, policy="io_shares"):
    """Median microseconds of the agent's epoch work with ``n_vms`` VMs."""
    return _epoch_work(n_vms, epochs, policy)[0]


def _timed(fn, costs):
    def timed(*args, **kwargs):
        t0 = time.thread_time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            costs.append(time.thread_time_ns() - t0)
    return timed


def _epoch_work(n_vms, epochs, policy):
    """Medians in us: (the whole epoch work, the market's ``end_epoch``, the report's build).

    The garbage of the synthetic intervals is collected before each timed
    epoch, so that a collection it triggers is not billed to the epoch.
    """
    agent = build(n_vms, policy)
    market_costs, report_costs = [], []
    agent.market.end_epoch = _timed(agent.market.end_epoch, market_costs)
    from resex_libvirt.board import report as report_mod
    from_summary = report_mod.HostReport.from_summary
    log = logging.getLogger("agent.loop")
    handler = logging.StreamHandler(io.StringIO())
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    costs = []
    try:
        report_mod.HostReport.from_summary = _timed(from_summary, report_costs)
        for k in range(epochs + 2):
            _intervals(agent, k)
            gc.collect()
            t0 = time.thread_time_ns()
            agent.run_epoch()
            costs.append(time.thread_time_ns() - t0)
            handler.stream.seek(0)
            handler.stream.truncate()
    finally:
        report_mod.HostReport.from_summary = from_summary
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
        agent.shutdown()
    return tuple(statistics.median(c[2:]) / 1000.0 for c in (costs, market_costs, report_costs))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.bench_agent")
    parser.add_argument("--vms", default="64,256,1024")
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args(argv)
    print("agent's epoch work (market epoch close, one report, summary line, publish "
          "hand-over, metrics record), median us")
    head = ("VMs", "total us", "market end_epoch us", "report build us", "the rest us",
            "goal us")
    print("%6s %10s %20s %18s %16s %8s" % head)
    for n in (int(x) for x in args.vms.split(",")):
        total, market, report = _epoch_work(n, args.epochs, "io_shares")
        print("%6d %10.0f %20.0f %18.0f %16.0f %8s" % (
            n, total, market, report, total - market - report,
            "1000" if n == 1024 else "-"))
    return 0


if __name__ == "__main__":
    main()
