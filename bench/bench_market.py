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

"""Cost of one control interval: sample, charge, decide.

Targets (``python -m bench goals``): at 64 VMs at most 50 us under FreeMarket
and IOShares with calm windows, 70 us in IOShares' worst case, so that the
paper's 1 ms interval costs the agent at most 5-7% of a core. The readings are
synthetic cumulative counters (what the adapters return), sampled as the
controller samples them (``Sampler.sample_rows`` on the market's rows), so
this measures the agent's own work, not the adapters'.
Half the VMs are latency-sensitive and report a window every interval:
``calm`` windows sit at their base latency, ``interfered`` ones 0-50% above
it, so most sensitive VMs name an interferer every interval (IOShares'
worst case).
"""

import argparse
import random
import statistics
import time

from resex_libvirt.fabric import base as fabric_base
from resex_libvirt.market import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from resex_libvirt import sampling
from resex_libvirt import sla


def one_run(n_vms, policy, intervals, seed=1, interfered=True):
    rng = random.Random(seed)
    params = market_mod.MarketParams(interval_s=0.001, intervals_per_epoch=1000, pcpus=n_vms)
    market = market_mod.Market(params, policy_mod.load(policy))
    names = ["vm-%04d" % i for i in range(n_vms)]
    for i, name in enumerate(names):
        vm_sla = sla.SLA(latency_sla_us=200.0) if i % 2 == 0 else sla.SLA()
        market.add(records.VMSpec(name, sla=vm_sla))
    sampler = sampling.Sampler()
    cpu = {n: 0 for n in names}
    tx = {n: 0 for n in names}
    spread = 100.0 if interfered else 0.0
    windows = {n: records.LatencyWindow(16, 200.0 + rng.random() * spread, 5.0, 300.0)
               for n in names[::2]}
    costs = []
    for k in range(intervals):
        for n in names:
            cpu[n] += rng.randrange(0, 1_000_000)
            tx[n] += rng.randrange(0, 1_000_000)
        io = {n: fabric_base.IOCounters(tx[n]) for n in names}
        t0 = time.perf_counter_ns()
        samples = sampler.sample_rows(k * 0.001, cpu, io, 1024, market.layout)
        market.step(samples, windows)
        costs.append(time.perf_counter_ns() - t0)
        if market.tick == params.intervals_per_epoch:
            market.end_epoch()
    return costs[10:]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench market")
    parser.add_argument("--intervals", type=int, default=2000)
    args = parser.parse_args(argv)
    print("control interval cost (sample + charge + decide), microseconds")
    print("%-12s %-10s %6s %10s %10s %10s %12s" % ("policy", "latency", "VMs", "median",
                                                   "p99", "mean", "% of 1 ms"))
    cases = [("free_market", True), ("io_shares", False), ("io_shares", True)]
    for policy, interfered in cases:
        for n in (8, 64, 256):
            costs = one_run(n, policy, args.intervals, interfered=interfered)
            med = statistics.median(costs) / 1000.0
            p99 = sorted(costs)[int(0.99 * len(costs))] / 1000.0
            mean = statistics.fmean(costs) / 1000.0
            print("%-12s %-10s %6d %10.1f %10.1f %10.1f %11.1f%%" % (
                policy, "interfered" if interfered else "calm", n, med, p99, mean,
                mean / 10.0))
    return 0


if __name__ == "__main__":
    main()
