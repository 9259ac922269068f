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

"""vCPU run delay from the ``vcpu.*`` keys of libvirt's bulk domain stats."""

import unittest

from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import vcpu_stats

#: The ``vcpu.*`` keys libvirt 9.0's QEMU driver returns for a 2-vCPU guest.
QEMU_RECORD = {
    "cpu.time": 9_000_000_000, "vcpu.current": 2, "vcpu.maximum": 2,
    "vcpu.0.state": 1, "vcpu.0.time": 3_000_000_000, "vcpu.0.wait": 0,
    "vcpu.0.delay": 700_000_000, "vcpu.0.halted": "no",
    "vcpu.1.state": 1, "vcpu.1.time": 2_000_000_000, "vcpu.1.wait": 0,
    "vcpu.1.delay": 650_000_000, "vcpu.1.halted": "yes",
}


class VcpuStatsTest(unittest.TestCase):

    def test_delays_and_run_times_are_summed_over_the_vcpus(self):
        self.assertEqual(base.VcpuTimes(1_350_000_000, 5_000_000_000, 2),
                         vcpu_stats.from_record(QEMU_RECORD))

    def test_an_older_libvirt_wait_key_stands_in_for_delay(self):
        record = {"vcpu.current": 1, "vcpu.0.time": 10, "vcpu.0.wait": 4}
        self.assertEqual(base.VcpuTimes(4, 10, 1), vcpu_stats.from_record(record))

    def test_a_record_without_delays_is_no_evidence(self):
        self.assertIsNone(vcpu_stats.from_record({"state.state": 1}))
        self.assertIsNone(vcpu_stats.from_record({"vcpu.current": 1, "vcpu.0.time": 10}))

    def test_a_sweep_keeps_only_the_domains_with_delays(self):
        got = vcpu_stats.from_sweep({"a": QEMU_RECORD, "b": {"cpu.time": 5}})
        self.assertEqual(["a"], list(got))

    def test_a_hypervisor_without_the_stats_gives_none(self):
        class Bare(base.Hypervisor):
            vms = cpu_times = set_knobs = get_knobs = restore_knobs = None
        self.assertEqual({}, Bare().vcpu_times())
