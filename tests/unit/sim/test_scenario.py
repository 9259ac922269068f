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

"""Scenario files: the packaged ones load; bad ones fail naming file, VM and key."""

import os
import tempfile
import unittest

from resex_libvirt import exceptions
from resex_libvirt.sim import scenario

MINIMAL = """
duration_s = 1.0
[[vms]]
name = "a"
buffer = "64K"
compute_us = 148.0
clients = 1
"""


def with_vm_lines(*lines, top=""):
    return top + "\nduration_s = 1.0\n[[vms]]\nname = \"a\"\n" + "\n".join(lines) + "\n"


class PackagedScenariosTest(unittest.TestCase):

    def test_the_papers_experiments_ship_and_load(self):
        names = scenario.names()
        for wanted in ("paper_64k_alone", "paper_64k_vs_2m", "paper_64k_vs_64k",
                       "paper_64k_vs_2m_10rpe", "paper_64k_vs_128k", "paper_64k_vs_256k",
                       "paper_64k_vs_512k", "paper_64k_vs_1m"):
            self.assertIn(wanted, names)
        for name in [n for n in names if n.startswith("paper_")]:
            sc = scenario.load(name)
            self.assertEqual(name, sc.name)
            self.assertEqual(1000, sc.intervals_per_epoch)
            self.assertEqual(float(1 << 30), sc.link_bytes_per_s)
            self.assertEqual(1024, sc.mtu)
            reporting = sc.vm("vm64k")
            self.assertEqual(209.0, reporting.sla.latency_sla_us)
            self.assertEqual(65536, reporting.workload.buffer_bytes)

    def test_the_interferer_sweep_doubles_the_buffer(self):
        sizes = [scenario.load("paper_64k_vs_" + s).vms[1].workload.buffer_bytes
                 for s in ("128k", "256k", "512k", "1m", "2m")]
        self.assertEqual([65536 * r for r in (2, 4, 8, 16, 32)], sizes)

    def test_ten_requests_per_epoch(self):
        w = scenario.load("paper_64k_vs_2m_10rpe").vm("vm2m").workload
        self.assertEqual(10.0, w.arrival_rate_per_s)
        self.assertEqual(0, w.clients)

    def test_a_vms_uuid_is_stable_and_distinct(self):
        a = scenario.load("paper_64k_vs_2m")
        b = scenario.load("paper_64k_vs_2m")
        self.assertEqual([v.uuid for v in a.vms], [v.uuid for v in b.vms])
        self.assertEqual(2, len({v.uuid for v in a.vms}))

    def test_an_unknown_name_lists_the_packaged_ones(self):
        with self.assertRaises(exceptions.ConfigError) as cm:
            scenario.load("no_such_scenario")
        self.assertIn("paper_64k_vs_2m", str(cm.exception))

    def test_a_path_loads_and_names_the_scenario_after_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "mine.toml")
            with open(path, "w") as f:
                f.write(MINIMAL)
            sc = scenario.load(path)
        self.assertEqual("mine", sc.name)
        self.assertEqual(path, sc.path)
        self.assertEqual(0.001, sc.interval_s)
        self.assertEqual(1.0, sc.epoch_s)

    def test_with_realtime_and_with_duration(self):
        sc = scenario.loads(MINIMAL)
        self.assertEqual(1.0, sc.with_realtime(1.0).realtime)
        self.assertRaises(exceptions.ConfigError, sc.with_realtime, -1)
        self.assertEqual(0.5, sc.with_duration(0.5).duration_s)


class ValidationTest(unittest.TestCase):

    def assertRejected(self, text, *fragments, source="s.toml"):
        with self.assertRaises(exceptions.ConfigError) as cm:
            scenario.loads(text, source=source)
        msg = str(cm.exception)
        self.assertIn(source, msg)
        for frag in fragments:
            self.assertIn(frag, msg)
        return msg

    def test_an_unknown_top_level_key_is_rejected(self):
        self.assertRejected(MINIMAL + "\ndurations = 3\n", "durations", "unknown key")

    def test_an_unknown_vm_key_names_the_vm(self):
        self.assertRejected(MINIMAL + "bufer = 3\n", "VM 'a'", "bufer", "unknown key")

    def test_an_unknown_link_key_is_rejected(self):
        self.assertRejected(MINIMAL + "[link]\nspeed = 3\n", "link.speed")

    def test_an_unknown_sla_key_is_rejected(self):
        self.assertRejected(MINIMAL + "[vms.sla]\nlatency_us = 3\n", "VM 'a'", "sla.latency_us")

    def test_sla_values_are_checked_by_the_products_own_keys(self):
        self.assertRejected(MINIMAL + "[vms.sla]\nshares = 0\n", "VM 'a'", "sla.shares", ">= 1")
        self.assertRejected(MINIMAL + "[vms.sla]\ncpu_reservation_pct = 50\ncpu_limit_pct = 20\n",
                            "sla.cpu_limit_pct")

    def test_sla_values_become_the_vms_sla(self):
        sc = scenario.loads(MINIMAL + "[vms.sla]\nlatency_sla_us = 209\n"
                            "cpu_reservation_pct = 5\ncpu_limit_pct = 80\nshares = 200\n")
        sla = sc.vm("a").sla
        self.assertTrue(sla.sensitive)
        self.assertEqual((209.0, 5.0, 80.0, 200), (sla.latency_sla_us, sla.reservation_pct,
                                                   sla.limit_pct, sla.shares))

    def test_exactly_one_kind_of_load(self):
        self.assertRejected(with_vm_lines('buffer = "1K"', "compute_us = 1"), "VM 'a'",
                            "clients")
        self.assertRejected(with_vm_lines('buffer = "1K"', "compute_us = 1", "clients = 1",
                                          "arrival_rate_per_s = 5"), "exactly one")

    def test_think_time_needs_clients(self):
        self.assertRejected(with_vm_lines('buffer = "1K"', "compute_us = 1",
                                          "arrival_rate_per_s = 5", "think_us = 3"), "think_us")

    def test_buffer_sizes(self):
        self.assertEqual(2 << 20, scenario.parse_size("2M"))
        self.assertEqual(131072, scenario.parse_size("128KiB"))
        self.assertEqual(1500, scenario.parse_size(1500))
        self.assertRaises(ValueError, scenario.parse_size, "2 parsecs")
        self.assertRaises(ValueError, scenario.parse_size, 0)
        self.assertRejected(with_vm_lines('buffer = "lots"', "compute_us = 1", "clients = 1"),
                            "VM 'a'", "buffer")

    def test_types_and_ranges(self):
        self.assertRejected(MINIMAL.replace("duration_s = 1.0", 'duration_s = "long"'),
                            "duration_s", "number")
        self.assertRejected(MINIMAL.replace("duration_s = 1.0", "duration_s = 0"),
                            "duration_s", "> 0")
        self.assertRejected(MINIMAL + "vcpus = 0\n", "VM 'a'", "vcpus")
        self.assertRejected(MINIMAL.replace("clients = 1", "clients = true"), "clients")

    def test_the_epoch_is_whole_intervals(self):
        self.assertRejected("epoch_s = 1.0005\n" + MINIMAL, "epoch_s", "whole number")

    def test_a_vm_lives_inside_the_run(self):
        self.assertRejected(MINIMAL + "start_s = 2.0\n", "start_s")
        self.assertRejected(MINIMAL + "start_s = 0.5\nstop_s = 0.2\n", "stop_s")

    def test_duplicate_vm_names_are_rejected(self):
        self.assertRejected(MINIMAL + MINIMAL.split("\n", 2)[2], "duplicate")

    def test_no_vms_is_rejected(self):
        self.assertRejected("duration_s = 1.0\n", "vms")

    def test_broken_toml_names_the_file(self):
        self.assertRejected("duration_s = = 1\n", "not valid TOML")


class CrossKeyValidationTest(unittest.TestCase):
    """Keys checked against each other: errors name the key, warnings keep the run."""

    HEAD = 'duration_s = 2.0\n[link]\nbytes_per_s = 1073741824\n'

    def vm(self, extra="", sla=""):
        text = self.HEAD + ('[[vms]]\nname = "a"\nbuffer = "64K"\ncompute_us = 148.0\n'
                            'clients = 1\n' + extra)
        if sla:
            text += "[vms.sla]\n" + sla
        return text

    def test_an_sla_below_the_vms_own_base_latency_is_an_error_naming_the_key(self):
        with self.assertRaises(exceptions.ConfigError) as ctx:
            scenario.loads(self.vm(sla="latency_sla_us = 150.0\n"))
        self.assertIn("sla.latency_sla_us", str(ctx.exception))
        self.assertIn("209", str(ctx.exception))
        scenario.loads(self.vm(sla="latency_sla_us = 209.0\n"))    # the paper's: accepted

    def test_a_buffer_larger_than_an_epoch_of_the_link_is_an_error(self):
        text = self.vm().replace('buffer = "64K"', 'buffer = "10G"')
        with self.assertRaises(exceptions.ConfigError) as ctx:
            scenario.loads(text)
        self.assertIn("buffer", str(ctx.exception))

    def test_a_stop_after_the_end_of_the_run_is_a_warning(self):
        sc = scenario.loads(self.vm("stop_s = 5.0\n"))
        self.assertEqual(1, len(sc.warnings))
        self.assertIn("stop_s", sc.warnings[0])

    def test_open_loop_arrivals_beyond_the_vms_capacity_are_a_warning(self):
        text = self.vm().replace("clients = 1", "arrival_rate_per_s = 10000")
        sc = scenario.loads(text)
        self.assertTrue(any("arrival_rate_per_s" in w for w in sc.warnings))

    def test_an_epoch_longer_than_the_run_is_a_warning(self):
        sc = scenario.loads("epoch_s = 5.0\n" + self.vm())
        self.assertTrue(any("epoch_s" in w for w in sc.warnings))

    def test_the_packaged_scenarios_load_without_warnings(self):
        for name in scenario.names():
            self.assertEqual((), scenario.load(name).warnings, name)
