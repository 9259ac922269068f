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

"""``run_check`` on the simulated host: what it lists and what it refuses.

The libvirt cases (libvirt's ``test:///`` driver) are in
``tests/functional/agent/test_check.py``.
"""

import io
import os
import socket
import tempfile
import unittest
from unittest import mock

from resex_agent import check
from resex_libvirt import board as board_mod
from resex_libvirt import exceptions
from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import scenario as scenario_mod
from tests.unit.agent import conf_helpers
from tests.unit.agent import test_ensembles
from tests.unit.agent import test_remote
from tests.unit.board import reports


make_conf = conf_helpers.conf_from_text


def run(text):
    out = io.StringIO()
    code = check.run_check(make_conf(text), out=out)
    return code, out.getvalue()


class SimulatedHostCheckTest(unittest.TestCase):

    def test_good_configuration_passes_and_lists_every_vm_with_its_sla(self):
        code, text = run("[agent]\nhost = cmp1\n")
        self.assertEqual(0, code, text)
        self.assertIn("configuration: ok (host cmp1, driver simulated", text)
        self.assertIn("policy io_shares", text)
        self.assertIn("hypervisor: ok (simulated paper_64k_vs_2m, 2 running VM(s)", text)
        self.assertIn("board: not configured", text)
        lines = [line for line in text.splitlines() if line.startswith("  ")]
        self.assertEqual(2, len(lines), text)
        scenario = scenario_mod.load("paper_64k_vs_2m")
        for vm in scenario.vms:
            line = [line for line in lines if line.startswith("  %s " % vm.name)][0]
            self.assertIn("SLA %s from scenario" % check.format_sla(vm.sla), line)
            self.assertIn("knobs simulated cap+weight", line)
        self.assertIn("latency_sla_us=", text)
        # The default consent rule: the paper's interferer never opted in.
        self.assertIn("\nconsent: opted_in (io_class=bulk)\n", text)
        vm2m = [line for line in lines if line.startswith("  vm2m ")][0]
        self.assertIn("cap 100..100% (did not opt in)", vm2m)
        self.assertTrue(text.endswith("check passed\n"))

    def test_a_sweep_libvirt_holds_is_waited_for_not_failed(self):
        # A domain being created holds every walk of the domain list for 1-2 s:
        # the loop skips the interval, the check waits for the sweep.
        real = host_mod.SimHost.vms
        late = [2]

        def vms(host):
            if late[0]:
                late[0] -= 1
                raise exceptions.SampleLate("hypervisor call vms still running after 50 ms")
            return real(host)
        with mock.patch.object(host_mod.SimHost, "vms", vms):
            code, text = run("[agent]\nhost = cmp1\n")
        self.assertEqual(0, code, text)
        self.assertEqual(0, late[0])
        self.assertIn("hypervisor: ok (simulated paper_64k_vs_2m, 2 running VM(s)", text)

    def test_a_sweep_late_for_longer_than_the_check_waits_fails_as_the_hypervisor(self):
        def vms(host):
            raise exceptions.SampleLate("hypervisor call vms still running after 50 ms")
        with mock.patch.object(host_mod.SimHost, "vms", vms), \
                mock.patch.object(check, "SWEEP_WAIT_S", 0.1):
            code, text = run("[agent]\nhost = cmp1\n")
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: hypervisor: hypervisor call vms still running", text)

    def test_the_consent_rule_in_force_is_printed_with_its_lists(self):
        code, text = run("[agent]\nconsent_projects = 8d6f0c2a,0b1c2d3e\n"
                         "consent_flavors = m1.bulk\n")
        self.assertEqual(0, code, text)
        self.assertIn("\nconsent: opted_in (io_class=bulk; projects: 2; flavors: m1.bulk)\n",
                      text)
        code, text = run("[agent]\ncap_consent = all\n")
        self.assertEqual(0, code, text)
        self.assertIn("\nconsent: all (every VM may be capped down to its reservation)\n", text)
        self.assertNotIn("did not opt in", text)
        self.assertIn("cap 0..100%, SLA defaults from scenario", text)

    def test_a_value_of_the_wrong_type_fails_naming_the_option(self):
        code, text = run("[market]\ncpu_price = cheap\n")
        self.assertEqual(1, code)
        self.assertIn("ERROR: configuration: [market] cpu_price", text)
        self.assertNotIn("check passed", text)

    def test_a_value_out_of_range_fails_naming_the_option(self):
        code, text = run("[market]\nmin_cap_pct = 0\n")
        self.assertEqual(1, code)
        self.assertIn("ERROR: configuration: [market] min_cap_pct", text)

    def test_an_epoch_that_is_not_whole_intervals_fails(self):
        code, text = run("[agent]\ninterval = 0.003\nepoch = 1.0\n")
        self.assertEqual(1, code)
        self.assertIn("ERROR: configuration:", text)
        self.assertIn("whole number of intervals", text)

    def test_an_unknown_scenario_fails_as_configuration(self):
        code, text = run("[sim]\nscenario = /nonexistent/scenario.toml\n")
        self.assertEqual(1, code)
        self.assertIn("ERROR: configuration:", text)
        self.assertIn("/nonexistent/scenario.toml", text)

    def test_sla_formatting_names_only_what_differs_from_the_defaults(self):
        from resex_libvirt import sla as sla_mod
        self.assertEqual("defaults", check.format_sla(sla_mod.SLA()))
        self.assertEqual("cpu_reservation_pct=20 io_class=bulk shares=200",
                         check.format_sla(sla_mod.SLA(reservation_pct=20.0, shares=200,
                                                      io_class="bulk")))


class RefusalsTest(unittest.TestCase):
    """What the agent would refuse at start fails the check, one line each."""

    def test_a_metrics_port_another_process_listens_on_fails(self):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            code, text = run("[metrics]\nenabled = true\nport = %d\n" % port)
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: metrics: [metrics] cannot listen on 127.0.0.1 port %d: " % port,
                      text)
        self.assertIn("Address already in use", text)

    def test_a_free_metrics_port_passes_and_stays_free(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        code, text = run("[metrics]\nenabled = true\nport = %d\n" % port)
        self.assertEqual(0, code, text)
        self.assertIn("metrics: ok (127.0.0.1 port %d is free)" % port, text)
        with socket.socket() as after:
            after.bind(("127.0.0.1", port))

    def test_a_directory_on_a_kernel_filesystem_is_unusable(self):
        self.assertIn("/proc is on proc, a kernel filesystem",
                      check._unusable_directory("/proc/resex"))
        self.assertIn("on sysfs", check._unusable_directory("/sys/resex/state"))
        with tempfile.TemporaryDirectory() as tmp:
            self.assertIsNone(check._unusable_directory(os.path.join(tmp, "a", "b")))
            path = os.path.join(tmp, "file")
            with open(path, "w"):
                pass
            self.assertEqual("%s is not a directory" % path,
                             check._unusable_directory(os.path.join(path, "state")))

    def test_the_filesystem_is_the_deepest_mount_the_last_on_top(self):
        with tempfile.NamedTemporaryFile("w", suffix=".mountinfo") as f:
            f.write("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                    "23 22 0:5 / /proc rw - proc proc rw\n"
                    "24 22 0:6 / /var/lib rw - xfs /dev/sdb rw\n"
                    "25 24 0:7 / /var/lib rw - tmpfs tmpfs rw\n"
                    "26 22 0:8 / /mnt/with\\040space rw - nfs srv:/x rw\n")
            f.flush()
            self.assertEqual("proc", check._filesystem_of("/proc/self", f.name))
            self.assertEqual("tmpfs", check._filesystem_of("/var/lib", f.name))
            self.assertEqual("ext4", check._filesystem_of("/var/libx", f.name))
            self.assertEqual("ext4", check._filesystem_of("/", f.name))
            self.assertEqual("nfs", check._filesystem_of("/mnt/with space/x", f.name))


class RemoteClaimsCheckTest(unittest.TestCase):

    def test_the_check_says_whether_remote_claims_are_acted_on_and_which_are_made(self):
        code, text = run("[agent]\nhost = cmp1\n")
        self.assertIn("remote claims: off (this host acts on no other host's victims)", text)
        with tempfile.TemporaryDirectory() as tmp:
            url = "sqlite://" + os.path.join(tmp, "board.sqlite")
            with board_mod.open_board(url) as board:
                board.publish(reports.make("sim-cmp1", addresses={"server-1": [test_remote.PEER]}))
                board.publish(reports.make("node1", sensitive_vms=1,
                                           remote_claims=[test_remote.a_claim()._asdict()]))
            code, text = run("[agent]\nhost = sim-cmp1\n[board]\nurl = %s\n"
                             "[remote_claims]\nenabled = true\n" % url)
        self.assertEqual(0, code, text)
        self.assertIn("remote claims: on (expiry 10 s; 1 claim(s) on this host's VMs now, "
                      "%s of node1 on server-1)" % test_remote.VICTIM, text)
        self.assertIn("ensembles: this host publishes members of 0; 0 over their bound "
                      "elsewhere", text)

    def test_the_check_names_the_shared_links_and_refuses_a_broken_topology(self):
        code, text = run("[agent]\nhost = cmp1\n")
        self.assertIn("shared links: none ([remote_claims] topology_file unset)", text)
        with tempfile.TemporaryDirectory() as tmp:
            url = "sqlite://" + os.path.join(tmp, "board.sqlite")
            topo = os.path.join(tmp, "topology.yaml")
            with open(topo, "w") as f:
                f.write("links:\n- {name: rack1-up, capacity_gbps: 10, "
                        "hosts: [sim-cmp1, sim-cmp2]}\n")
            with board_mod.open_board(url) as board:
                board.publish(reports.make("sim-cmp2", link_utilisation=0.5,
                                           link_capacity_bytes_per_s=1.25e9))
            conf = ("[agent]\nhost = sim-cmp1\n[board]\nurl = %s\n[remote_claims]\n"
                    "enabled = true\ntopology_file = %s\n" % (url, topo))
            code, text = run(conf)
            self.assertEqual(0, code, text)
            self.assertIn("shared links: rack1-up (10 Gb/s, 2 host(s), 1 heard, 50% loaded)",
                          text)
            with open(topo, "w") as f:
                f.write("links:\n- {name: rack1-up, hosts: [sim-cmp1]}\n")
            code, text = run(conf)
        self.assertNotEqual(0, code, text)
        self.assertIn("topology_file %s: links[0]: missing capacity_gbps" % topo, text)

    def test_the_check_names_the_ensembles_over_their_bound_elsewhere(self):
        member = test_ensembles.a_member()
        with tempfile.TemporaryDirectory() as tmp:
            url = "sqlite://" + os.path.join(tmp, "board.sqlite")
            with board_mod.open_board(url) as board:
                board.publish(reports.make("sim-cmp1", sensitive_vms=1, ensembles=[
                    member._replace(vm="mine", mean_us=205.0)._asdict()]))
                board.publish(reports.make("node1", sensitive_vms=1,
                                           ensembles=[member._asdict()]))
            code, text = run("[agent]\nhost = sim-cmp1\n[board]\nurl = %s\n"
                             "[remote_claims]\nenabled = true\n" % url)
        self.assertEqual(0, code, text)
        self.assertIn("ensembles: this host publishes members of 1; 1 over their bound "
                      "elsewhere, %s (worst member %s on node1 +100%%)"
                      % (test_ensembles.GROUP, test_ensembles.REMOTE_MEMBER), text)
        code, text = run("[agent]\nhost = sim-cmp1\n[board]\nurl =\n"
                         "[remote_claims]\nenabled = true\n")
        self.assertEqual(1, code, text)
        self.assertIn("[remote_claims] enabled needs [board] url", text)
