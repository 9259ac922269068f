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

"""The engine: caps per scheduling period, FCFS service, CPU accounting, determinism."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.sim import credit_scheduler
from resex_libvirt.sim import model as model_mod
from resex_libvirt.sim import testbed as testbed_mod
from resex_libvirt.sim import workload as workload_mod

GIB = float(1 << 30)
MS = 1_000_000
PERIOD = model_mod.CALIBRATED.sched_period_ns


def server(buffer="64K", compute_us=148.0, **kw):
    sizes = {"64K": 65536, "2M": 2 << 20, "1K": 1024}
    if not kw:
        kw = {"clients": 1}
    return workload_mod.Workload(buffer_bytes=sizes[buffer], compute_us=compute_us, **kw)


class CapSchedulerTest(unittest.TestCase):

    def test_a_cap_is_a_fraction_of_each_period(self):
        s = credit_scheduler.CapScheduler(10 * MS, 25.0)
        self.assertEqual(2.5 * MS, s.budget_ns())
        s.consume(MS)
        self.assertEqual(1.5 * MS, s.budget_ns())
        s.new_period()
        self.assertEqual(2.5 * MS, s.budget_ns())

    def test_none_or_a_full_pcpu_means_uncapped(self):
        self.assertFalse(credit_scheduler.CapScheduler(10 * MS, None).capped)
        self.assertFalse(credit_scheduler.CapScheduler(10 * MS, 100.0).capped)
        self.assertEqual(credit_scheduler.INFINITE,
                         credit_scheduler.CapScheduler(10 * MS, 150.0).budget_ns())

    def test_lowering_the_cap_mid_period_counts_what_was_used(self):
        s = credit_scheduler.CapScheduler(10 * MS, 50.0)
        s.consume(3 * MS)
        s.set_cap(20.0)
        self.assertEqual(0, s.budget_ns())

    def test_a_zero_cap_is_refused(self):
        self.assertRaises(ValueError, credit_scheduler.CapScheduler, 10 * MS, 0)


class TestbedTest(unittest.TestCase):

    def test_an_uncapped_busy_server_shows_a_full_cpu(self):
        tb = testbed_mod.Testbed(GIB)
        vm = tb.add_vm("a", server())
        tb.run_until(100 * MS)
        self.assertAlmostEqual(100 * MS, vm.cpu_ns, delta=1)

    def test_an_idle_server_uses_no_cpu(self):
        tb = testbed_mod.Testbed(GIB)
        vm = tb.add_vm("a", server(arrival_rate_per_s=1e-3))
        tb.run_until(100 * MS)
        self.assertEqual(0, vm.cpu_ns)

    def test_polling_counts_as_cpu_but_compute_alone_does_not_fill_it(self):
        # Open loop at 1000 requests/s of 148 us compute + 61 us transfer:
        # about 20.9% busy, compute and polling both counted.
        tb = testbed_mod.Testbed(GIB)
        vm = tb.add_vm("a", server(arrival_rate_per_s=1000.0, arrival_process="uniform"))
        tb.run_until(1000 * MS)
        self.assertAlmostEqual(0.209, vm.cpu_ns / (1000 * MS), delta=0.002)

    def test_server_latency_alone_is_compute_plus_transfer(self):
        tb = testbed_mod.Testbed(GIB, model=model_mod.ModelParams(compute_cv=0.0))
        vm = tb.add_vm("a", server())
        tb.run_until(10 * MS)
        lats = {lat for _t, lat in vm.server.latencies}
        self.assertEqual(1, len(lats))
        self.assertAlmostEqual(148_000 + 61_035, lats.pop(), delta=2)

    def test_requests_are_served_first_come_first_served(self):
        tb = testbed_mod.Testbed(GIB)
        vm = tb.add_vm("a", server(arrival_rate_per_s=8000.0))   # overloaded: a queue forms
        tb.run_until(50 * MS)
        done = [t for t, _lat in vm.server.latencies]
        arrivals = [t - lat for t, lat in vm.server.latencies]
        self.assertGreater(len(done), 100)
        self.assertEqual(sorted(arrivals), arrivals)
        self.assertEqual(sorted(done), done)
        self.assertGreater(len(vm.server.queue), 0)

    @settings(max_examples=25, deadline=None)
    @given(cap=st.floats(min_value=1.0, max_value=99.0),
           buffer=st.sampled_from(["1K", "64K", "2M"]),
           compute_us=st.floats(min_value=0.0, max_value=3000.0),
           changes=st.lists(st.floats(min_value=1.0, max_value=99.0), max_size=4))
    def test_a_capped_vm_never_runs_more_than_its_cap_in_a_period(self, cap, buffer,
                                                                  compute_us, changes):
        tb = testbed_mod.Testbed(GIB)
        vm = tb.add_vm("a", server(buffer, compute_us))
        tb.add_vm("b", server("2M"))
        tb.set_cap("a", cap)
        last = 0
        caps = [cap] + changes
        for k in range(8):
            # Lower the cap (only) at a period boundary: the quota of the
            # period is then exactly the cap's.
            c = min(caps[:1 + k % len(caps)])
            tb.set_cap("a", c)
            tb.run_until((k + 1) * PERIOD)
            used = vm.cpu_ns - last
            last = vm.cpu_ns
            self.assertLessEqual(used, c / 100.0 * PERIOD + 1)

    def test_a_capped_busy_vm_gets_its_cap_exactly(self):
        tb = testbed_mod.Testbed(GIB)
        vm = tb.add_vm("a", server("2M"))
        tb.set_cap("a", 12.5)
        tb.run_until(100 * PERIOD)
        self.assertAlmostEqual(0.125, vm.cpu_ns / (100 * PERIOD), delta=1e-6)

    def test_a_capped_busy_vm_waits_the_rest_of_each_period_as_run_delay(self):
        tb = testbed_mod.Testbed(GIB)
        vm = tb.add_vm("a", server("2M"))
        tb.set_cap("a", 12.5)
        tb.run_until(100 * PERIOD)
        # Always wanting the CPU: every ns is run or run delay.
        self.assertAlmostEqual(0.875, vm.delay_ns / (100 * PERIOD), delta=1e-6)
        self.assertEqual(100 * PERIOD, vm.cpu_ns + vm.delay_ns)

    def test_an_uncapped_or_idle_vm_has_no_run_delay(self):
        tb = testbed_mod.Testbed(GIB)
        busy = tb.add_vm("a", server("2M"))
        idle = tb.add_vm("b", server(arrival_rate_per_s=1e-3))
        tb.set_cap("b", 5.0)
        tb.run_until(100 * PERIOD)
        self.assertEqual(0, busy.delay_ns)
        self.assertEqual(0, idle.delay_ns)

    def test_a_parked_vm_posts_nothing(self):
        """Transfers start only while the VM runs: never in the parked part of a period."""
        tb = testbed_mod.Testbed(GIB)
        tb.add_vm("a", server("1K", 10.0))
        tb.set_cap("a", 20.0)
        posted = []
        orig = tb.link.post

        def spy(transfer):
            posted.append(tb.now_ns)
            orig(transfer)
        tb.link.post = spy
        tb.run_until(20 * PERIOD)
        self.assertGreater(len(posted), 100)
        for t in posted:
            self.assertLessEqual(t % PERIOD, 0.2 * PERIOD)

    def test_a_cap_throttles_the_vms_io(self):
        tb = testbed_mod.Testbed(GIB)
        free = tb.add_vm("free", server("2M"))
        capped = tb.add_vm("capped", server("2M"))
        tb.set_cap("capped", 3.125)
        tb.run_until(1000 * MS)
        self.assertLess(capped.tx_bytes, free.tx_bytes / 3)

    def test_the_same_seed_gives_the_same_run(self):
        def once(seed):
            tb = testbed_mod.Testbed(GIB, seed=seed)
            a = tb.add_vm("a", server())
            tb.add_vm("b", server("2M", arrival_rate_per_s=200.0))
            tb.run_until(200 * MS)
            return a.server.latencies
        self.assertEqual(once(7), once(7))
        self.assertNotEqual(once(7), once(8))

    def test_a_vm_runs_only_between_its_start_and_stop(self):
        tb = testbed_mod.Testbed(GIB)
        vm = tb.add_vm("a", server(), start_ns=10 * MS, stop_ns=30 * MS)
        tb.run_until(5 * MS)
        self.assertEqual("pending", vm.state)
        tb.run_until(20 * MS)
        self.assertTrue(vm.active)
        tb.run_until(50 * MS)
        self.assertEqual("stopped", vm.state)
        self.assertAlmostEqual(20 * MS, vm.cpu_ns, delta=1)
        self.assertTrue(all(10 * MS <= t <= 30 * MS for t, _l in vm.server.latencies))

    def test_an_open_loop_queue_is_bounded(self):
        tb = testbed_mod.Testbed(GIB, model=model_mod.ModelParams(max_queue=10))
        vm = tb.add_vm("a", server("2M", arrival_rate_per_s=5000.0))
        tb.run_until(100 * MS)
        self.assertLessEqual(len(vm.server.queue), 10)
        self.assertGreater(vm.server.dropped, 0)


class LinkModesTest(unittest.TestCase):
    """The event loop steps a few transfers itself, many on the link's arrays: same bits."""

    def _run(self, vector_from):
        from unittest import mock

        from resex_libvirt.sim import link as link_mod
        with mock.patch.object(link_mod, "VECTOR_FROM", vector_from):
            tb = testbed_mod.Testbed(GIB, seed=3)
            for i in range(12):
                tb.add_vm("vm%d" % i, server("64K" if i % 3 else "2M", compute_us=20.0 + i),
                          start_ns=i * MS // 4, stop_ns=None if i % 5 else 30 * MS)
            for step in range(1, 41):
                if step == 10:
                    tb.set_cap("vm4", 30.0)
                tb.run_until(step * MS)
        return {n: (vm.cpu_ns, vm.tx_bytes, vm.server.latencies, vm.server.completed)
                for n, vm in tb.vms.items()}

    def test_the_same_run_whichever_steps_the_link(self):
        inline = self._run(1 << 30)
        arrays = self._run(4)
        switching = self._run(9)
        self.assertEqual(inline, arrays)
        self.assertEqual(inline, switching)


class RunThroughTest(unittest.TestCase):
    """run_through: one pass of the loop, the run of one run_until per stop to the last bit."""

    def _testbed(self):
        tb = testbed_mod.Testbed(GIB, seed=5, pcpus=2)
        for i in range(5):
            tb.add_vm("vm%d" % i, server("64K" if i % 2 else "2M", compute_us=30.0 + 7 * i),
                      start_ns=i * MS // 3, stop_ns=None if i != 3 else 25 * MS)
        tb.run_until(0)
        tb.set_cap("vm0", 35.0)
        return tb

    def _state(self, tb):
        return (tb.now_ns, tb.link.busy_ns, tb.changes,
                {n: (vm.state, vm.cpu_ns, vm.delay_ns, vm.tx_bytes, vm.server.latencies,
                     vm.server.completed, vm.sched.used_ns) for n, vm in tb.vms.items()})

    @settings(max_examples=25, deadline=None)
    @given(st.lists(st.integers(min_value=0, max_value=40 * MS), min_size=1, max_size=30))
    def test_the_same_run_as_one_run_until_per_stop(self, stops):
        stops = sorted(stops) + [stops[0]]       # a stop in the past is a no-op
        one_by_one = self._testbed()
        for stop in stops:
            one_by_one.run_until(stop)
        through = self._testbed()
        through.run_through(stops)
        self.assertEqual(self._state(one_by_one), self._state(through))

    def test_no_stop_is_a_no_op(self):
        tb = self._testbed()
        before = self._state(tb)
        tb.run_through(())
        self.assertEqual(before, self._state(tb))
