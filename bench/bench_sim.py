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

"""Speed of the simulated testbed: how fast ``resex-sim`` runs.

* ``model``: simulated seconds per wall second of the bare testbed (no
  market), for the paper's 2-VM scenario and for 8 and 32 VMs (copies of
  the 64 KB server and the 2 MB interferer sharing the link);
* ``static``: the same run uncontrolled without the market
  (``resex_libvirt.sim.runner.run_static``, as the paper's static-cap sweep
  and uncontrolled runs make it);
* ``runner``: the same with the market in the loop at the paper's 1 ms
  interval (``resex_libvirt.sim.runner.run`` under IOShares), and the wall
  time per control interval;
* ``paper``: the wall time of the whole ``resex-sim paper`` evaluation, with
  one worker process per CPU as the command makes it (``--jobs``), and its
  rate: the simulated seconds of all its runs (the figures' and the
  frontier sweep's) per wall second, beside the goal (:data:`PAPER_GOAL`).

Figures only; nothing is asserted.
"""

import argparse
import dataclasses
import os
import time

from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import runner
from resex_libvirt.sim import scenario as scenario_mod
from resex_research import paper


#: Simulated seconds per wall second ``resex-sim paper`` should make (performance.rst).
PAPER_GOAL = 30.0


def simulated_s(runs):
    """The simulated seconds of ``runs`` (:class:`~resex_libvirt.sim.runner.RunResult`)."""
    return sum(len(r.series["t_s"]) * r.series_every * r.interval_s for r in runs)


def paper_rate(jobs, duration_s=None):
    """``(rate, runs, wall s)`` of ``resex-sim paper``: simulated seconds per wall second."""
    t0 = time.perf_counter()
    ev = paper.Evaluation(duration_s=duration_s, jobs=jobs)
    ev.evaluate()
    wall = time.perf_counter() - t0
    runs = ev.distinct_runs()       # the figures' runs and the frontier sweep's
    return simulated_s(runs) / wall, len(runs), wall


def widened(n):
    """paper_64k_vs_2m with ``n`` VMs: alternating 64 KB servers and 2 MB interferers."""
    base = scenario_mod.load("paper_64k_vs_2m")
    vms = []
    for i in range(n):
        proto = base.vms[i % 2]
        name = "%s-%d" % (proto.name, i)
        vms.append(dataclasses.replace(proto, name=name,
                                       uuid=scenario_mod.vm_uuid(base.name, name)))
    return dataclasses.replace(base, name="%s_x%d" % (base.name, n), vms=tuple(vms))


def bench_model(sc, seconds):
    sc = sc.with_duration(seconds)
    t0 = time.perf_counter()
    host = host_mod.SimHost(sc)
    host.advance_to(seconds)
    return seconds / (time.perf_counter() - t0)


def bench_static(sc, seconds):
    sc = sc.with_duration(seconds)
    t0 = time.perf_counter()
    runner.run_static(sc)
    return seconds / (time.perf_counter() - t0)


def bench_runner(sc, seconds):
    sc = sc.with_duration(seconds)
    res = runner.run(sc, "io_shares")
    return seconds / res.wall_s, res.wall_s / sc.intervals * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench_sim")
    parser.add_argument("--seconds", type=float, default=2.0, help="simulated seconds per run")
    parser.add_argument("--skip-paper", action="store_true")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes for the paper (default: one per CPU)")
    args = parser.parse_args(argv)
    print("%-28s %14s %15s %16s %14s" % ("scenario", "model sim-s/s", "static sim-s/s",
                                         "runner sim-s/s", "us/interval"))
    for sc in (scenario_mod.load("paper_64k_vs_2m"), widened(8), widened(32)):
        model_rate = bench_model(sc, args.seconds)
        static_rate = bench_static(sc, args.seconds)
        runner_rate, per_interval = bench_runner(sc, args.seconds)
        print("%-28s %14.2f %15.2f %16.2f %14.1f" % (sc.name, model_rate, static_rate,
                                                     runner_rate, per_interval))
    if not args.skip_paper:
        rate, runs, wall = paper_rate(args.jobs)
        print("resex-sim paper: %d runs in %.1f s, %d jobs: %.1f simulated s per wall s"
              "   goal >= %g" % (runs, wall, args.jobs, rate, PAPER_GOAL))
    return 0


if __name__ == "__main__":
    main()
