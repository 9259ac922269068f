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

"""SimHost: the simulated host behind the agent's interfaces."""

import dataclasses
import threading
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt import exceptions
from resex_libvirt.fabric import base as fabric_base
from resex_libvirt.hypervisor import base as hyp_base
from resex_libvirt.market import table
from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import scenario

LIFETIMES = """
name = "lifetimes"
duration_s = 0.5
realtime = 0.0
[link]
bytes_per_s = 1073741824
mtu = 2048
[[vms]]
name = "early"
buffer = "64K"
compute_us = 148.0
clients = 1
stop_s = 0.2
[vms.sla]
latency_sla_us = 209
[[vms]]
name = "late"
buffer = "2M"
compute_us = 148.0
clients = 1
start_s = 0.1
vcpus = 2
"""


class SimHostTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.host = host_mod.SimHost(scenario.loads(LIFETIMES))
        self.early = self.host.uuid_of("early")
        self.late = self.host.uuid_of("late")

    def test_it_is_a_hypervisor_and_a_fabric_monitor(self):
        self.assertIsInstance(self.host, hyp_base.Hypervisor)
        self.assertIsInstance(self.host, fabric_base.FabricMonitor)
        self.assertEqual(2, self.host.pcpus())
        self.assertEqual(fabric_base.LinkInfo("sim0", float(1 << 30), 2048), self.host.link())

    def test_vms_appear_and_vanish_at_their_start_and_stop(self):
        self.assertEqual({self.early}, set(self.host.vms()))
        self.host.advance_to(0.15)
        vms = self.host.vms()
        self.assertEqual({self.early, self.late}, set(vms))
        info = vms[self.early]
        self.assertEqual("early", info.name)
        self.assertEqual(host_mod.KNOBS, info.knobs)
        self.assertEqual("scenario", info.sla_source)
        self.assertEqual(209.0, info.sla.latency_sla_us)
        self.assertEqual(2, vms[self.late].vcpus)
        self.host.advance_to(0.25)
        self.assertEqual({self.late}, set(self.host.vms()))
        self.assertRaises(exceptions.VMGone, self.host.set_knobs, self.early, 50.0, 256)

    def test_cumulative_cpu_and_tx_counters(self):
        self.host.advance_to(0.1)
        cpu = self.host.cpu_times()
        io = self.host.counters(self.host.vms())
        self.assertAlmostEqual(0.1e9, cpu[self.early], delta=10)
        # A closed-loop 64 KB server moves about 300 MB/s alone.
        self.assertGreater(io[self.early].tx_bytes, 25e6)
        self.assertEqual(-(-io[self.early].tx_bytes // 2048), io[self.early].tx_packets)
        self.host.advance_to(0.15)
        self.assertGreater(self.host.cpu_times()[self.early], cpu[self.early])
        self.assertGreater(self.host.counters(self.host.vms())[self.early].tx_bytes,
                           io[self.early].tx_bytes)

    def test_counters_skip_vms_that_are_not_running(self):
        seen = self.host.counters({self.early: None, self.late: None})
        self.assertEqual({self.early}, set(seen))

    def test_knobs_round_trip_and_none_or_full_size_means_uncapped(self):
        self.host.advance_to(0.15)
        self.assertEqual({"cap": 0, "weight": 256}, self.host.get_knobs(self.late))
        self.host.set_knobs(self.late, 30.0, 512)
        saved = self.host.get_knobs(self.late)
        self.assertEqual({"cap": 30.0, "weight": 512}, saved)
        self.host.set_knobs(self.late, 200.0, 256)   # 2 vCPUs: 200 is the full size
        self.assertEqual(0, self.host.get_knobs(self.late)["cap"])
        self.host.restore_knobs(self.late, saved)
        self.assertEqual(saved, self.host.get_knobs(self.late))
        self.host.set_knobs(self.late, None, 256)
        self.assertEqual(0, self.host.get_knobs(self.late)["cap"])

    def test_bad_knobs_are_refused(self):
        self.assertRaises(exceptions.HypervisorError, self.host.set_knobs, self.early, 0, 256)
        self.assertRaises(exceptions.HypervisorError, self.host.set_knobs, self.early, 50, 0)
        self.assertRaises(exceptions.HypervisorError, self.host.restore_knobs, self.early,
                          "junk")

    def test_a_cap_throttles_the_vm(self):
        self.host.advance_to(0.1)
        self.host.set_knobs(self.late, 10.0, 256)
        before = self.host.cpu_times()[self.late]
        self.host.advance_to(0.2)
        self.assertLessEqual(self.host.cpu_times()[self.late] - before, 0.1 * 0.1e9 + 1)

    def test_a_capped_vm_reports_its_parked_time_as_vcpu_run_delay(self):
        self.host.advance_to(0.1)
        self.host.set_knobs(self.late, 10.0, 256)
        before = self.host.vcpu_times()[self.late]
        self.host.advance_to(0.2)
        after = self.host.vcpu_times()[self.late]
        # Busy all along: 10 % run, 90 % waiting runnable.
        self.assertAlmostEqual(0.09e9, after.delay_ns - before.delay_ns, delta=1e3)
        self.assertAlmostEqual(0.01e9, after.run_ns - before.run_ns, delta=1e3)
        self.assertNotIn(self.early, self.host.vcpu_times())

    def test_windows_summarise_fresh_latencies_of_running_vms(self):
        self.host.advance_to(0.05)
        win = self.host.windows()[self.early]
        self.assertEqual(64, win.count)
        self.assertAlmostEqual(209.0, win.mean_us, delta=3.0)
        self.host.advance_to(0.3)
        self.assertNotIn(self.early, self.host.windows())

    def test_windows_go_stale_when_a_vm_stops_reporting(self):
        host = host_mod.SimHost(scenario.loads(LIFETIMES), freshness_s=0.01)
        host.advance_to(0.05)
        host.set_knobs(host.uuid_of("early"), 1.0, 256)   # 100 us per 10 ms: no completions
        host.advance_to(0.069)
        win = host.windows().get(host.uuid_of("early"))
        self.assertTrue(win is None or win.count <= 2, win)

    def test_only_vms_with_a_latency_sla_get_windows(self):
        self.host.advance_to(0.15)
        self.assertEqual([self.early], list(self.host.windows()))

    def test_only_vms_with_a_latency_sla_have_their_reports_kept(self):
        self.host.advance_to(0.15)
        self.assertEqual([self.early], list(self.host._buffers))
        self.assertTrue(self.host.results()["late"]["latencies_us"])

    def test_a_host_without_reports_keeps_none_and_runs_the_same(self):
        quiet = host_mod.SimHost(scenario.loads(LIFETIMES), reports=False)
        for host in (self.host, quiet):
            host.advance_to(0.15)
        self.assertEqual({}, quiet.windows())
        self.assertEqual({}, quiet._buffers)
        self.assertTrue(self.host.windows())
        self.assertEqual(self.host.results(), quiet.results())

    def test_a_cached_window_is_the_window_computed_afresh(self):
        host = host_mod.SimHost(scenario.loads(LIFETIMES), freshness_s=0.01)
        early = host.uuid_of("early")
        buf = host._buffers[early]
        t = 0.0
        while t < 0.25:
            t += 0.0005
            if abs(t - 0.05) < 1e-9:
                host.set_knobs(early, 1.0, 256)   # reports stop: windows age out
            host.advance_to(t)
            added = buf.added
            got = host.windows().get(early)
            if got is not None:
                self.assertEqual(buf.window(host.now()), dataclasses.replace(got, new=None), t)
                self.assertEqual(0, host.windows()[early].new, t)   # handed again
            else:
                self.assertIsNone(buf.window(host.now()), t)
            self.assertEqual(added, buf.added)

    def test_a_window_handed_again_has_no_new_requests(self):
        self.host.advance_to(0.05)
        first = self.host.windows()[self.early]
        self.assertEqual(first.count, first.new)
        again = self.host.windows()[self.early]
        self.assertEqual((first.count, first.mean_us, 0), (again.count, again.mean_us, again.new))
        self.host.advance_to(0.0502)
        after = self.host.windows()[self.early]
        self.assertEqual(len(self.host.testbed.vms[self.early].server.latencies)
                         - sum(1 for done, _lat in self.host.testbed.vms[self.early]
                               .server.latencies if done <= 50_000_000), after.new)
        self.assertGreater(after.new, 0)

    @settings(max_examples=25, deadline=None, database=None)
    @given(st.lists(st.tuples(st.floats(0.0001, 0.02), st.sampled_from([None, None, 1.0, 30.0])),
                    min_size=1, max_size=40),
           st.sampled_from([2, 8, 64]), st.sampled_from([0.002, 0.01, 0.05]))
    def test_new_counts_the_window_requests_completed_since_the_last_hand_over(
            self, steps, size, freshness):
        host = host_mod.SimHost(scenario.loads(LIFETIMES), window_size=size,
                                freshness_s=freshness)
        early = host.uuid_of("early")
        done = host.testbed.vms[early].server.latencies
        handed_ns = -1
        t = 0.0
        for dt, cap in steps:
            t = min(0.19, t + dt)
            if cap is not None:
                host.set_knobs(early, cap, 256)
            host.advance_to(t)
            win = host.windows().get(early)
            if win is None:
                continue
            # In completion order: the window is the last ``count`` requests.
            expect = sum(1 for ns, _lat in done[len(done) - win.count:] if ns > handed_ns)
            self.assertEqual(expect, win.new, t)
            handed_ns = host.testbed.now_ns

    @settings(max_examples=25, deadline=None, database=None)
    @given(st.lists(st.floats(0.0001, 0.01), min_size=1, max_size=40))
    def test_the_new_requests_of_a_run_are_every_request_completed(self, steps):
        # Windows hold more than a step's completions and outlive a step: none is missed.
        host = host_mod.SimHost(scenario.loads(LIFETIMES), window_size=256, freshness_s=0.011)
        early = host.uuid_of("early")
        total = 0
        t = 0.0
        for dt in steps:
            t = min(0.19, t + dt)
            host.advance_to(t)
            win = host.windows().get(early)
            again = host.windows().get(early)      # handed again: adds nothing
            total += sum(w.new for w in (win, again) if w is not None)
        self.assertEqual(len(host.results()["early"]["latency_log"]), total)
        self.assertEqual(host.results()["early"]["completed"], total)

    def test_vm_records_are_made_once_and_follow_starts_and_stops(self):
        first = self.host.vms()
        self.host.advance_to(0.05)
        self.assertIs(first[self.early], self.host.vms()[self.early])
        self.host.advance_to(0.15)
        both = self.host.vms()
        self.assertEqual({self.early, self.late}, set(both))
        self.assertIs(first[self.early], both[self.early])
        self.host.advance_to(0.25)
        self.assertEqual({self.late}, set(self.host.vms()))

    def test_readings_by_rows_are_the_mappings_in_the_rows_order(self):
        rows = table.Table()
        for uuid in (self.late, "not-a-vm", self.early):
            rows.add(uuid)
        for t in (0.05, 0.15, 0.25):
            self.host.advance_to(t)
            cpu = self.host.cpu_times()
            io = self.host.counters(self.host.vms())
            self.assertEqual([cpu.get(u, -1) for u in rows.names],
                             self.host.cpu_times_rows(rows).tolist(), t)
            tx, rx = self.host.counters_rows(rows)
            self.assertEqual([io[u].tx_bytes if u in io else 0 for u in rows.names],
                             tx.tolist(), t)
            self.assertEqual([0, 0, 0], rx.tolist())
        rows.remove("not-a-vm")                   # a new version: realigned
        self.assertEqual(2, len(self.host.cpu_times_rows(rows)))

    def test_readings_by_rows_follow_the_model_and_are_read_only(self):
        rows = table.Table()
        for uuid in (self.early, self.late):
            rows.add(uuid)
        vms = self.host.testbed.vms
        for t in (0.12, 0.12, 0.13, 0.15):
            self.host.advance_to(t)
            self.host.set_knobs(self.late, 40.0, 256)      # the same instant: same readings
            cpu = self.host.cpu_times_rows(rows)
            delay = self.host.delay_times_rows(rows)
            tx, _rx = self.host.counters_rows(rows)
            self.assertEqual([vms[u].cpu_ns for u in rows.names], cpu.tolist(), t)
            self.assertEqual([vms[u].delay_ns for u in rows.names], delay.tolist(), t)
            self.assertEqual([int(vms[u].tx_bytes) for u in rows.names], tx.tolist(), t)
            for column in (cpu, delay, tx):
                self.assertRaises(ValueError, column.__setitem__, 0, 1)

    def test_advance_through_is_advance_to_each_time(self):
        times = [0.007 * k for k in range(1, 60)]
        one_by_one = host_mod.SimHost(scenario.loads(LIFETIMES))
        for t in times:
            one_by_one.advance_to(t)
        through = host_mod.SimHost(scenario.loads(LIFETIMES))
        through.advance_through(times)
        self.assertEqual(one_by_one.now(), through.now())
        self.assertEqual(one_by_one.results(), through.results())
        self.assertEqual(one_by_one.windows(), through.windows())
        self.assertRaises(ValueError, through.advance_through, [0.5, float("nan")])

    def test_the_generation_moves_only_when_a_vm_starts_or_stops(self):
        seen = [self.host.generation]
        for t in (0.05, 0.09, 0.15, 0.18, 0.25):
            self.host.advance_to(t)
            seen.append(self.host.generation)
        moved = [b != a for a, b in zip(seen, seen[1:])]
        self.assertEqual([False, False, True, False, True], moved)

    def test_the_clock_advances_the_model_and_finishes(self):
        clock = self.host.clock()
        self.assertEqual(0.0, clock.now())
        self.assertTrue(clock.sleep_until(0.25))
        self.assertAlmostEqual(0.25, clock.now())
        self.assertFalse(clock.finished)
        clock.sleep_until(10.0)
        self.assertTrue(clock.finished)
        self.assertAlmostEqual(0.5, clock.now())

    def test_a_paced_clock_sleeps_the_simulated_time_times_the_factor(self):
        slept = []
        host = host_mod.SimHost(scenario.loads(LIFETIMES).with_realtime(1000.0))
        clock = host.clock(sleep=slept.append)
        clock.sleep_until(0.001)
        self.assertEqual(1, len(slept))
        self.assertGreater(slept[0], 0.5)
        self.assertLessEqual(slept[0], 1.0)

    def test_a_paced_clock_stops_waiting_when_told_to(self):
        host = host_mod.SimHost(scenario.loads(LIFETIMES).with_realtime(1000.0))
        stop = threading.Event()
        stop.set()
        self.assertFalse(host.clock().sleep_until(0.01, stop))
        self.assertAlmostEqual(0.01, host.now())

    def test_results_and_final_table(self):
        self.host.advance_to(0.5)
        res = self.host.results()
        self.assertEqual({"early", "late"}, set(res))
        self.assertAlmostEqual(0.2, res["early"]["alive_s"])
        self.assertAlmostEqual(0.4, res["late"]["alive_s"])
        self.assertGreater(len(res["early"]["latencies_us"]), 500)
        self.assertGreater(res["late"]["throughput_mb_s"], 100)
        text = self.host.format_results()
        self.assertIn("early", text)
        self.assertIn("mean us", text)

    def test_sync_is_a_no_op(self):
        self.assertIsNone(self.host.sync(self.host.vms()))
