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
reads the VMs' vCPU run delays, builds the host report once, logs its
summary line (at INFO, through a real handler), hands the report to the
background publisher and feeds one epoch record to the Prometheus sink.
:func:`epoch_work_us` times exactly that (:meth:`resex_agent.loop.Agent.run_epoch`)
on the simulated host (:class:`resex_libvirt.sim.host.SimHost`) with ``n``
VMs, the paper's 64 KB server and 2 MB interferer alternating (half of them
latency-sensitive), under IOShares, each epoch after ten control intervals
the agent ran on that host (:meth:`resex_agent.loop.Agent.run_interval`); the
board is an in-memory one (the publisher's thread sends the report off the
loop, so the loop's cost is the hand-over).

An epoch that built no host report, or logged a warning or an error, is not
a measure: :class:`bench.guard.ErrorPath` is raised, naming it, and the bench stops
(the ``make bench`` row once timed an epoch that failed on a missing
hypervisor, unnoticed). The board must have received the last report.

Goal: at most 1 ms at 1024 VMs (one interval of the paper's 1 ms
interval). Times are the loop thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``),
so that other processes on a loaded machine do not inflate them and the
publisher thread's work (off the loop) is not billed to it.
``python -m bench.bench_agent [--vms 64,256,1024]`` prints the medians; the
``make bench`` goals table calls :func:`epoch_work_us`.
"""

import argparse
import gc
import io
import logging
import statistics
import time

from bench import bench_sim
from bench import guard
from resex_agent import loop
from resex_agent import metrics as metrics_mod
from resex_libvirt.board import report as report_mod
from resex_libvirt import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.sim import host as host_mod

INTERVALS_PER_EPOCH = 10


class _MemoryBoard:
    """A board that keeps the last report (the bench times the loop, not a store)."""

    last = None
    published = 0

    def publish(self, report):
        self.last = report
        self.published += 1

    def count(self):
        return 1

    def close(self):
        pass


def build(n_vms, policy="io_shares", epochs=15, board=None):
    """A :class:`resex_agent.loop.Agent` on a simulated host of ``n_vms`` VMs, board, metrics."""
    sc = bench_sim.widened(n_vms)
    sc = sc.with_duration((epochs + 3) * INTERVALS_PER_EPOCH * sc.interval_s)
    host = host_mod.SimHost(sc)
    link = host.link()
    params = market_mod.MarketParams(
        interval_s=sc.interval_s, intervals_per_epoch=INTERVALS_PER_EPOCH, pcpus=host.pcpus(),
        link_bytes_per_s=link.capacity_bytes_per_s, mtu=link.mtu)
    settings = loop.LoopSettings(host="bench", interval_s=sc.interval_s,
                                 intervals_per_epoch=INTERVALS_PER_EPOCH,
                                 background_publish=True)
    agent = loop.Agent(settings, market_mod.Market(params, policy_mod.load(policy)), host, host,
                       [host], board=board or _MemoryBoard(), clock=host.clock(),
                       metrics=metrics_mod.PrometheusMetrics("127.0.0.1", 0))  # never started
    agent.controller.prime(agent.clock.now())
    return agent


def _intervals(agent):
    """One epoch of control intervals, the model advanced by one interval before each."""
    for _ in range(INTERVALS_PER_EPOCH):
        agent.clock.sleep_until(agent.clock.now() + agent.settings.interval_s)
        agent.run_interval()


def _check(agent, problems, n_vms):
    """Raise :class:`~bench.guard.ErrorPath` unless the epoch built its report, silently."""
    epoch = agent.summaries[-1].epoch
    problems.check("epoch %d at %d VMs" % (epoch, n_vms))
    report = agent.last_report
    if report is None or report.epoch != epoch or report.state != report_mod.CONTROLLING:
        raise guard.ErrorPath("epoch %d at %d VMs built no controlling host report (%r)"
                              % (epoch, n_vms, report))


def epoch_work_us(n_vms, epochs=15, policy="io_shares"):
    """Median microseconds of the agent's epoch work with ``n_vms`` VMs.

    Raises :class:`bench.guard.ErrorPath` when an epoch did not do its work.
    """
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

    The first two epochs are not counted (warming up). The garbage of the
    intervals is collected before each timed epoch, so that a collection it
    triggers is not billed to the epoch.
    """
    board = _MemoryBoard()
    agent = build(n_vms, policy, epochs + 2, board)
    market_costs, report_costs = [], []
    agent.market.end_epoch = _timed(agent.market.end_epoch, market_costs)
    from_summary = report_mod.HostReport.from_summary
    log = logging.getLogger("resex_agent.loop")
    summary_line = logging.StreamHandler(io.StringIO())
    level = log.level
    log.addHandler(summary_line)
    log.setLevel(logging.INFO)
    costs = []
    try:
        report_mod.HostReport.from_summary = _timed(from_summary, report_costs)
        with guard.Problems() as problems:
            for _ in range(epochs + 2):
                _intervals(agent)
                gc.collect()
                t0 = time.thread_time_ns()
                agent.run_epoch()
                costs.append(time.thread_time_ns() - t0)
                _check(agent, problems, n_vms)
                summary_line.stream.seek(0)
                summary_line.stream.truncate()
    finally:
        report_mod.HostReport.from_summary = from_summary
        log.removeHandler(summary_line)
        log.setLevel(level)
        agent.shutdown()        # sends the last report to the board
    if board.last is None or board.last.epoch != agent.last_report.epoch:
        raise guard.ErrorPath("the board did not receive the last epoch's report (%d of %d "
                              "epochs published)" % (board.published, len(costs)))
    return tuple(statistics.median(c[2:]) / 1000.0 for c in (costs, market_costs, report_costs))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.bench_agent")
    parser.add_argument("--vms", default="64,256,1024")
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args(argv)
    print("agent's epoch work on the simulated host (market epoch close, run delays, one "
          "report, summary line, publish hand-over, metrics record), median us")
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
