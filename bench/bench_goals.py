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

"""The performance goals, each measured and printed next to its goal.

    python -m bench goals            # make bench prints this table first
    python -m bench goals --quick    # shorter runs (rough figures)

First the machine's pace (a Python loop and a small numpy add: the absolute
targets belong to the machine they were set on), then the rows (medians of
``--runs`` runs; nothing is asserted, the machine is shared):

* agent work per interval at 64 VMs, the scope of ``bench_market`` (sample +
  charge + decide on synthetic cumulative counters): FreeMarket, IOShares
  typical (calm windows) and IOShares worst (every sensitive VM interfered);
* the whole interval on the simulated host at 1024 VMs: the model advanced
  by one 1 ms interval plus the agent's control step on it (discover,
  sample, market, actuate, tallies), the runner's loop;
* the growth exponent of that interval from 64 to 1024 VMs
  (``log(t1024 / t64) / log(16)``: 1 is linear, 0 constant);
* epoch work at 1024 VMs: the agent's ``run_epoch`` on the simulated host
  (market epoch, run delays, host report, summary line, publish hand-over,
  metrics; ``bench_agent``, which stops the table if an epoch built no
  report or logged a warning or an error);
* ``resex-sim paper``: simulated seconds per wall second over all its runs;
* the scheduler: ResEx filter + weigher over nova's ComputeFilter +
  RAMWeigher, 10,000 hosts, a latency-sensitive request (``bench_nova``).
"""

import argparse
import contextlib
import io
import logging
import math
import os
import statistics
import time

from bench import bench_agent
from bench import bench_market
from bench import bench_sim
from resex_libvirt import control
from resex_libvirt import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.sim import host as host_mod


def agent_step_us(policy, interfered, intervals):
    return statistics.median(bench_market.one_run(64, policy, intervals,
                                                  interfered=interfered)) / 1000.0


def sim_interval_us(n, intervals, warmup=20):
    """Median wall time of one simulated interval (model + control step) at ``n`` VMs."""
    sc = bench_sim.widened(n).with_duration((warmup + intervals + 1) * 0.001)
    host = host_mod.SimHost(sc)
    link = host.link()
    params = market_mod.MarketParams(
        interval_s=sc.interval_s, intervals_per_epoch=sc.intervals_per_epoch,
        pcpus=host.pcpus(), link_bytes_per_s=link.capacity_bytes_per_s, mtu=link.mtu)
    ctl = control.Controller(market_mod.Market(params, policy_mod.load("io_shares")),
                             host, host, [host])
    ctl.prime(host.now())
    costs = []
    for i in range(1, warmup + intervals + 1):
        t0 = time.perf_counter_ns()
        host.advance_to(i * sc.interval_s)
        ctl.step(host.now())
        if i > warmup:
            costs.append(time.perf_counter_ns() - t0)
    return statistics.median(costs) / 1000.0


def scheduler_ratio():
    """ResEx pair over nova's pair, 10,000 hosts, sensitive request (from bench_nova)."""
    from bench import bench_nova
    fn = getattr(bench_nova, "goal_ratio", None)
    if fn is not None:
        return fn()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench_nova.main(["--sizes", "10000", "--repeat", "5"])
    for line in out.getvalue().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0] == "10000" and parts[1] == "sensitive":
            return float(parts[4])
    return None


def machine_pace():
    """This machine's pace, to compare tables printed on different machines.

    The best of 3: a 10**6-step Python loop (ms) and numpy's add of two
    64-float arrays (us), the two kinds of work the per-interval rows do.
    """
    import timeit

    import numpy as np
    loop_ms = min(timeit.repeat("for i in r: x += i", "x = 0; r = range(10 ** 6)",
                                number=1, repeat=3)) * 1000.0
    a = np.ones(64)
    add_us = min(timeit.repeat(lambda: a + a, number=100000, repeat=3)) * 10.0
    return loop_ms, add_us


def _median(fn, runs):
    values = [fn() for _ in range(runs)]
    return statistics.median(values), values


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench goals")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true",
                        help="short runs: 300 intervals, 1 s paper runs, 20 sim intervals")
    parser.add_argument("--skip-paper", action="store_true")
    parser.add_argument("--skip-nova", action="store_true")
    args = parser.parse_args(argv)
    logging.getLogger("resex_agent").setLevel(logging.WARNING)
    intervals = 300 if args.quick else 2000
    sim_intervals = 20 if args.quick else 60
    rows = []

    def row(measure, value, unit, goal, fmt="%.1f"):
        shown = "n/a" if value is None else (fmt % value) + unit
        rows.append((measure, shown, goal))
        print("%-62s %16s   goal %s" % (measure, shown, goal), flush=True)

    loop_ms, add_us = machine_pace()
    print("machine pace: 10**6-step Python loop %.0f ms, numpy add of 64 floats %.2f us"
          % (loop_ms, add_us))
    print("%-62s %16s   %s" % ("measure (median of %d)" % args.runs, "now", "goal"))
    for label, policy, interfered, goal in (
            ("FreeMarket", "free_market", True, "<= 50 us"),
            ("IOShares typical", "io_shares", False, "<= 50 us"),
            ("IOShares worst", "io_shares", True, "<= 70 us")):
        value, _ = _median(lambda: agent_step_us(policy, interfered, intervals), args.runs)
        row("agent work per interval, 64 VMs, %s" % label, value, " us", goal)
    t64, _ = _median(lambda: sim_interval_us(64, sim_intervals), args.runs)
    t1024, _ = _median(lambda: sim_interval_us(1024, sim_intervals), args.runs)
    row("whole interval on the simulated host, 64 VMs", t64 / 1000.0, " ms", "(for the exponent)",
        fmt="%.2f")
    row("whole interval on the simulated host, 1024 VMs", t1024 / 1000.0, " ms", "<= 1 ms",
        fmt="%.2f")
    row("growth exponent 64 -> 1024 VMs", math.log(t1024 / t64) / math.log(16), "", "<= 0.5",
        fmt="%.2f")
    value, _ = _median(lambda: bench_agent.epoch_work_us(1024), args.runs)
    row("epoch work, 1024 VMs (agent run_epoch, loop thread CPU)", value / 1000.0, " ms",
        "<= 1 ms", fmt="%.2f")
    if args.skip_paper:
        row("resex-sim paper, simulated s per wall s", None, "", ">= 30")
    else:
        rate, runs, wall = bench_sim.paper_rate(
            os.cpu_count() or 1, 1.0 if args.quick else None)
        row("resex-sim paper, simulated s per wall s (%d runs, %.0f s, %d jobs)"
            % (runs, wall, os.cpu_count() or 1), rate,
            "", ">= 30")
    if args.skip_nova:
        row("filter + weigher / ComputeFilter + RAMWeigher, 10k hosts", None, "", "<= 0.45x")
    else:
        row("filter + weigher / ComputeFilter + RAMWeigher, 10k hosts", scheduler_ratio(), "x",
            "<= 0.45x", fmt="%.2f")
    return 0


if __name__ == "__main__":
    main()
