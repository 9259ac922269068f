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
interval). ``python -m bench.bench_agent [--vms 64,256,1024]`` prints the
medians; the ``make bench`` table calls :func:`epoch_work_us`.
"""

import argparse
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
                                 intervals_per_epoch=INTERVALS_PER_EPOCH)
    try:
        agent = loop.Agent(settings, market, None, None, board=_MemoryBoard(),
                           background_publish=True)
    except TypeError:       # an agent from before the background publisher (comparisons)
        agent = loop.Agent(settings, market, None, None, board=_MemoryBoard())
    agent.clock = clock_mod.RealClock()
    agent.metrics = metrics_mod.PrometheusMetrics("127.0.0.1", 0)    # never started
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


def _epoch_work(n_vms, epochs, policy):
    """(median us of the whole epoch work, median us of the market's ``end_epoch`` in it)."""
    agent = build(n_vms, policy)
    market_costs = []
    end_epoch = agent.market.end_epoch

    def timed_end_epoch():
        t0 = time.perf_counter_ns()
        try:
            return end_epoch()
        finally:
            market_costs.append(time.perf_counter_ns() - t0)
    agent.market.end_epoch = timed_end_epoch
    log = logging.getLogger("agent.loop")
    handler = logging.StreamHandler(io.StringIO())
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    costs = []
    try:
        for k in range(epochs + 2):
            _intervals(agent, k)
            t0 = time.perf_counter_ns()
            agent.run_epoch()
            costs.append(time.perf_counter_ns() - t0)
            handler.stream.seek(0)
            handler.stream.truncate()
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
        agent.shutdown()
    return (statistics.median(costs[2:]) / 1000.0,
            statistics.median(market_costs[2:]) / 1000.0)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.bench_agent")
    parser.add_argument("--vms", default="64,256,1024")
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args(argv)
    print("agent's epoch work (market epoch close, one report, summary line, publish "
          "hand-over, metrics record), median us")
    print("%6s %12s %22s %16s %10s" % ("VMs", "median us", "market end_epoch us",
                                       "the rest us", "goal us"))
    for n in (int(x) for x in args.vms.split(",")):
        total, market = _epoch_work(n, args.epochs, "io_shares")
        print("%6d %12.0f %22.0f %16.0f %10s" % (n, total, market, total - market,
                                                 "1000" if n == 1024 else "-"))
    return 0


if __name__ == "__main__":
    main()
