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

"""Closed loop on the scenarios the paper does not show: the rules that protect the sensitive.

"Worse than uncontrolled" is measured against the SLA: a sensitive VM's
excess is how far its mean latency is over ``latency_sla_us x (1 +
threshold)`` (0 when within its SLA); no policy may leave it larger than the
uncontrolled run does. The paper's algorithms (the ``_paper`` variants)
fail these tests; that is why the default policies deviate from them.
"""

import unittest

from resex_libvirt.sim import scenario as scenario_mod
from resex_research import policy_catalog

_RUNS = {}


def run(name, policy):
    key = (name, policy)
    if key not in _RUNS:
        _RUNS[key] = policy_catalog.run(scenario_mod.load(name), policy)
    return _RUNS[key]


def excess(name, result):
    """{sensitive VM: mean latency over its SLA bound, as a fraction (0 when within)}."""
    out = {}
    for vm in scenario_mod.load(name).vms:
        if vm.sla.sensitive:
            bound = vm.sla.latency_sla_us * (1.0 + vm.sla.interference_threshold_pct / 100.0)
            out[vm.name] = max(0.0, result.vm(vm.name).latency_mean_us / bound - 1.0)
    return out


class NeverWorseThanUncontrolledTest(unittest.TestCase):

    def assert_no_sla_vm_worse(self, name, policy):
        base = excess(name, run(name, "none"))
        got = excess(name, run(name, policy))
        for vm, value in got.items():
            self.assertLessEqual(value, base[vm] + 0.005, "%s under %s: %s" % (name, policy, vm))

    def test_a_sensitive_vm_with_big_buffers_is_never_cut_for_its_own_traffic(self):
        name = "sensitive_big_buffers"
        for policy in ("free_market", "io_shares", "latency_target"):
            self.assert_no_sla_vm_worse(name, policy)
        paper = excess(name, run(name, "io_shares_paper"))["vm1m_sla"]
        self.assertGreater(paper, excess(name, run(name, "none"))["vm1m_sla"])

    def test_latency_target_protects_the_sensitive_vm_with_big_buffers(self):
        name = "sensitive_big_buffers"
        self.assertLess(excess(name, run(name, "latency_target"))["vm1m_sla"],
                        excess(name, run(name, "none"))["vm1m_sla"])

    def test_two_sensitive_vms_both_end_no_worse_and_the_tighter_one_better(self):
        name = "two_sensitive"
        for policy in ("io_shares", "latency_target"):
            self.assert_no_sla_vm_worse(name, policy)
        self.assertLess(excess(name, run(name, "latency_target"))["vm64k"],
                        excess(name, run(name, "none"))["vm64k"])
        self.assertGreater(excess(name, run(name, "io_shares_paper"))["vm512k_sla"], 0.0)

    def test_a_bursty_interferer_leaves_no_sla_vm_worse(self):
        for policy in ("io_shares", "latency_target"):
            self.assert_no_sla_vm_worse("bursty_interferer", policy)


class EveryInterfererPaysTest(unittest.TestCase):

    def test_both_interferers_are_taxed(self):
        res = run("two_interferers", "io_shares")
        for vm in ("vm1m", "vm512k"):
            self.assertLess(res.vm(vm).cap_mean_pct, 50.0, vm)
        self.assertLess(res.vm("vm64k").latency_mean_us,
                        run("two_interferers", "io_shares_paper").vm("vm64k").latency_mean_us)

    def test_many_small_senders_are_each_taxed(self):
        res = run("many_small_senders", "io_shares")
        for k in range(1, 7):
            self.assertLess(res.vm("small%d" % k).cap_mean_pct, 90.0)
        self.assertLess(res.vm("vm64k").latency_mean_us,
                        run("many_small_senders", "io_shares_paper").vm("vm64k").latency_mean_us)


class BelowThresholdTest(unittest.TestCase):

    def test_an_open_loop_interferer_below_the_threshold_keeps_its_queue(self):
        name = "open_loop_below_threshold"
        uncontrolled = run(name, "none").vm("vm2m_open").latency_mean_us
        self.assertLess(run(name, "none").vm("vm64k").latency_mean_us, 1.10 * 209.0)
        # The settling law cuts it now and then (a delay's evidence over the
        # threshold, doc/source/market.rst "Control that settles"): its queue
        # grows by a third (4.6 against 3.4 ms), and stays bounded.
        self.assertLess(run(name, "io_shares").vm("vm2m_open").latency_mean_us,
                        1.5 * uncontrolled)
        # The paper's rule taxes it on single windows and its queue grows without bound.
        self.assertGreater(run(name, "io_shares_paper").vm("vm2m_open").latency_mean_us,
                           5.0 * uncontrolled)


class NoStackingTest(unittest.TestCase):

    def test_a_fast_link_costs_an_uncomplained_sender_nothing(self):
        uncontrolled = run("link_100g", "none").vm("vm2m").throughput_mb_s
        paper = run("link_100g", "io_shares_paper").vm("vm2m").throughput_mb_s
        ours = run("link_100g", "io_shares").vm("vm2m").throughput_mb_s
        self.assertLess(paper, 0.95 * uncontrolled)
        self.assertGreaterEqual(ours, 0.99 * uncontrolled)


if __name__ == "__main__":
    unittest.main()
