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

"""CPU contention in the simulated host: VMs sharing fewer pCPUs wait, by weight."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt import exceptions
from resex_libvirt.sim import cpu_share
from resex_libvirt.sim import credit_scheduler
from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import runner
from resex_libvirt.sim import scenario as scenario_mod
from resex_libvirt.sim import testbed as testbed_mod
from resex_libvirt.sim import workload as workload_mod

NS = 1_000_000_000


def hog():
    return workload_mod.Workload(buffer_bytes=4096, compute_us=10000.0, clients=1)


class FairSharesTest(unittest.TestCase):

    @given(st.lists(st.tuples(st.floats(0.0, 100.0), st.integers(1, 65535)), min_size=1,
                    max_size=8), st.integers(1, 8))
    @settings(max_examples=200, deadline=None)
    def test_shares_never_exceed_demand_nor_the_pcpus(self, vms, pcpus):
        demands = [d for d, _w in vms]
        shares = cpu_share.fair_shares(demands, [w for _d, w in vms], pcpus)
        for d, s in zip(demands, shares):
            self.assertLessEqual(s, d + 1e-9)
        self.assertLessEqual(sum(shares), 100.0 * pcpus + 1e-6)
        # Work-conserving: pCPU time is left only when every demand is met.
        if sum(shares) < min(sum(demands), 100.0 * pcpus) - 1e-6:
            self.fail("pCPU time left while a VM wants more: %r" % (shares,))

    def test_busy_vms_share_by_weight(self):
        self.assertEqual([50.0, 50.0], cpu_share.fair_shares([100.0, 100.0], [256, 256], 1))
        shares = cpu_share.fair_shares([100.0, 100.0, 100.0], [512, 256, 256], 2)
        self.assertEqual([100.0, 50.0, 50.0], shares)

    def test_no_contention_with_a_pcpu_each(self):
        self.assertEqual([None, None], cpu_share.entitlements([100.0, 100.0], [1, 1000],
                                                              [None, None], 2))

    def test_a_cap_frees_pcpu_time_for_the_others(self):
        got = cpu_share.entitlements([100.0, 100.0], [256, 256], [None, 10.0], 1)
        self.assertEqual([90.0, 10.0], got)


class ShareInTheSchedulerTest(unittest.TestCase):

    def test_the_budget_is_the_lower_of_cap_and_share(self):
        s = credit_scheduler.CapScheduler(10_000_000, 60.0)
        s.set_share(40.0)
        self.assertEqual(40.0, s.cap_pct)
        self.assertEqual(60.0, s.knob_pct)
        s.set_share(None)
        self.assertEqual(60.0, s.cap_pct)
        s.set_cap(None)
        s.set_share(30.0)
        self.assertEqual(30.0, s.cap_pct)


class ContendedTestbedTest(unittest.TestCase):

    def run_two(self, pcpus, weights=(256, 256)):
        tb = testbed_mod.Testbed(float(1 << 30), pcpus=pcpus)
        for name, w in zip(("a", "b"), weights):
            tb.add_vm(name, hog())
        tb.run_until(0)
        for name, w in zip(("a", "b"), weights):
            tb.vms[name].weight = w
        tb.run_until(NS)
        return tb.vms["a"], tb.vms["b"]

    def test_two_busy_vms_on_one_pcpu_each_run_half_and_wait_half(self):
        a, b = self.run_two(1)
        for vm in (a, b):
            self.assertAlmostEqual(0.5, vm.cpu_ns / NS, delta=0.03)
            self.assertAlmostEqual(0.5, vm.delay_ns / NS, delta=0.03)

    def test_weights_split_the_pcpu(self):
        a, b = self.run_two(1, weights=(512, 256))
        self.assertAlmostEqual(2.0 / 3.0, a.cpu_ns / NS, delta=0.03)
        self.assertAlmostEqual(1.0 / 3.0, b.cpu_ns / NS, delta=0.03)

    def test_a_pcpu_each_means_no_wait(self):
        for pcpus in (None, 2):
            a, b = self.run_two(pcpus)
            self.assertEqual(0, a.delay_ns + b.delay_ns)
            self.assertGreater(a.cpu_ns, 0.99 * NS)


class ContendedScenarioTest(unittest.TestCase):

    def test_pcpus_is_a_scenario_key(self):
        sc = scenario_mod.load("cpu_hog")
        self.assertEqual(2, sc.pcpus)
        self.assertEqual(2, host_mod.SimHost(sc).pcpus())
        self.assertEqual(2, host_mod.SimHost(scenario_mod.load("paper_64k_vs_2m")).pcpus())
        with self.assertRaises(exceptions.ConfigError):
            scenario_mod.loads('duration_s = 1\npcpus = 0\n[[vms]]\nname = "a"\n'
                               'buffer = "4K"\ncompute_us = 1\nclients = 1\n')

    def test_run_delay_is_the_evidence_the_host_reports(self):
        sc = scenario_mod.load("cpu_hog_one_pcpu").with_duration(0.7)
        host = host_mod.SimHost(sc)
        host.advance_to(0.7)
        delays = host.vcpu_times()
        victim = delays[sc.vm("vm64k").uuid]
        self.assertGreater(victim.delay_ns, 0.3 * 0.2 * NS)   # hog from 0.5 s

    def test_a_cpu_hog_hurts_the_sensitive_vm_and_io_shares_protects_it(self):
        sc = scenario_mod.load("cpu_hog").with_duration(2.0)
        bound = 209.0 * 1.1
        none = runner.run(sc, "none").vm("vm64k")
        ours = runner.run(sc, "io_shares")
        self.assertGreater(none.latency_mean_us, 1.2 * bound)
        self.assertLess(ours.vm("vm64k").latency_mean_us, bound)
        # By weight, not by cap: the hogs keep the pCPU the server leaves.
        for name in ("hog1", "hog2"):
            self.assertEqual(100.0, ours.vm(name).cap_min_pct)
            self.assertGreater(ours.vm(name).cpu_pct, 45.0)
