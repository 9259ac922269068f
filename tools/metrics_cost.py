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

"""Print what the Prometheus sink costs the control loop, per interval.

``python tools/metrics_cost.py [--vms 2,20,100] [--intervals 5000]``

For N VMs it times :meth:`resex_agent.metrics.PrometheusMetrics.observe_interval`
(what the loop calls every interval) next to :meth:`Market.step` (the work
the interval exists for), on a real market with the IOShares policy and
synthetic samples, and one scrape of the endpoint's text. Prints figures;
asserts nothing.
"""

import argparse
import time
import urllib.request

from resex_agent import loop
from resex_agent import metrics as metrics_mod
from resex_libvirt import control
from resex_libvirt.hypervisor import base as hyp_base
from resex_libvirt import market as market_mod
from resex_libvirt.market import io_shares
from resex_libvirt.market import records
from resex_libvirt import sla as sla_mod


def build(n):
    params = market_mod.MarketParams(interval_s=0.1, intervals_per_epoch=10, pcpus=max(1, n))
    market = market_mod.Market(params, io_shares.IOShares())
    settings = loop.LoopSettings(host="bench", interval_s=0.1, intervals_per_epoch=10)
    agent = loop.Agent(settings, market, None, None)
    for i in range(n):
        uuid = "00000000-0000-4000-8000-%012d" % i
        sla = sla_mod.SLA(latency_sla_us=200.0) if i % 2 == 0 else sla_mod.SLA()
        info = hyp_base.VMInfo(uuid=uuid, name="vm-%d" % i, sla=sla)
        agent.vms[uuid] = control.VMRecord(info=info)
        market.add(market_mod.VMSpec(vm=uuid, sla=sla))
    return agent


def measure(n, intervals):
    agent = build(n)
    metrics = metrics_mod.PrometheusMetrics("127.0.0.1", 0)
    metrics.start()
    try:
        uuids = list(agent.vms)
        samples = {u: records.Sample(u, 0.0, 50.0, 64 * 1024, 64) for u in uuids}
        windows = {u: records.LatencyWindow(16, 230.0, 10.0, 260.0) for u in uuids[::2]}
        step_s = observe_s = 0.0
        for _ in range(intervals):
            t0 = time.perf_counter()
            decisions = agent.market.step(samples, windows)
            t1 = time.perf_counter()
            metrics.observe_interval(loop.IntervalRecord(
                samples, decisions, windows, agent.market.last_interference, 0.1, agent.vms,
                agent.market.ledger.balance))
            t2 = time.perf_counter()
            step_s += t1 - t0
            observe_s += t2 - t1
        agent.market.end_epoch()
        host, port = metrics.address
        t0 = time.perf_counter()
        with urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=10) as r:
            size = len(r.read())
        scrape_s = time.perf_counter() - t0
    finally:
        metrics.close()
    return step_s / intervals, observe_s / intervals, scrape_s, size


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vms", default="2,20,100")
    p.add_argument("--intervals", type=int, default=5000)
    args = p.parse_args(argv)
    print("%5s %14s %18s %8s %11s %10s" % (
        "VMs", "market.step us", "observe_interval us", "ratio", "scrape ms", "scrape kB"))
    for n in (int(x) for x in args.vms.split(",")):
        step, observe, scrape, size = measure(n, args.intervals)
        print("%5d %14.1f %18.1f %8.2f %11.2f %10.1f" % (
            n, step * 1e6, observe * 1e6, observe / step, scrape * 1e3, size / 1024.0))


if __name__ == "__main__":
    main()
