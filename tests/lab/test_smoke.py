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

"""Lab smoke test (run by ``.ci/run``): the real actuator on a real QEMU guest.

Sets everything up itself (Debian packages through ``tools/install-deb.sh``,
libvirtd, the guest kernel and initramfs, one CPU-burning TCG guest) and
tears it all down by PID, also on failure. It asserts only facts that do not
depend on timing noise: the cap libvirt reads back equals the requested
quota, the guest's cgroup carries that quota, SIGTERM and crash
reconciliation restore the original quota, and the hypervisor object
carries on after libvirtd is killed and restarted. The achieved-CPU figures
are printed by ``make lab`` (:mod:`tests.lab.run`), not asserted.
"""

import contextlib
import os
import signal
import threading

import libvirt

from resex_agent import journal as journal_mod
from resex_agent import watchdog
from resex_libvirt.hypervisor import psi
from tests.lab import base
from tests.lab import harness
from tests.lab import run
from tests import machine


class LabSmokeTest(base.LabTestCase):

    @classmethod
    def set_up_lab(cls):
        cls.guest = cls.lab.guest("resex-smoke", cls.lab.initramfs(), role="burn")
        cls.hyp = cls.hypervisor(backoff_min=0.2, backoff_max=2.0)
        cls.hyp.vms()
        cls.original = cls.hyp.get_knobs(cls.guest.uuid)

    def setUp(self):
        super().setUp()
        self.addCleanup(self.hyp.restore_knobs, self.guest.uuid, self.original)

    def test_guest_is_adopted_with_qemu_knobs(self):
        info = self.hyp.vms()[self.guest.uuid]
        self.assertEqual("qemu-posix", info.knobs.driver)
        self.assertEqual(-1, self.original["global_quota"])

    def test_caps_read_back_from_libvirt_and_the_cgroup_equal_the_requested_quota(self):
        for cap in run.CAPS:
            expected = run.expected_quota(cap)
            params, cgroup = run.apply_cap(self.hyp, self.guest, cap)
            self.assertEqual(expected["global_quota"], params["global_quota"], cap)
            self.assertEqual(expected["global_period"], params["global_period"], cap)
            self.assertAlmostEqual(cap, self.hyp.cap_pct(self.guest.uuid))
            self.assertIsNotNone(cgroup, "the guest's cpu cgroup was not found")
            self.assertEqual((expected["global_period"], expected["global_quota"]), cgroup[:2])
        self.hyp.set_knobs(self.guest.uuid, None, None)
        self.assertEqual(-1, harness.cgroup_cpu_quota(self.guest)[1])

    def test_a_write_of_the_values_in_force_is_skipped(self):
        # The one deadband is the control loop's ([agent] deadband_pct); the
        # hypervisor only skips writing what is already in force.
        self.assertTrue(self.hyp.set_knobs(self.guest.uuid, 20.0, None))
        self.assertFalse(self.hyp.set_knobs(self.guest.uuid, 20.0, None))
        self.assertEqual(20000, self.hyp.get_knobs(self.guest.uuid)["global_quota"])
        self.assertTrue(self.hyp.set_knobs(self.guest.uuid, 21.0, None))
        self.assertTrue(self.hyp.set_knobs(self.guest.uuid, 21.0, 300))
        self.assertTrue(self.hyp.set_knobs(self.guest.uuid, None, 300))
        self.assertEqual((-1, 1200), tuple(
            self.hyp.get_knobs(self.guest.uuid)[k] for k in ("global_quota", "cpu_shares")))

    def test_journal_restore_all_writes_the_original_quota_back(self):
        journal = journal_mod.Journal(os.path.join(self.workdir, "journal.json"))
        journal.remember(self.guest.uuid, self.hyp.get_knobs(self.guest.uuid))
        self.hyp.set_knobs(self.guest.uuid, 10.0, 512)
        self.assertEqual(2048, self.hyp.get_knobs(self.guest.uuid)["cpu_shares"])
        self.assertEqual({}, journal.restore_all(self.hyp))
        self.assertEqual(self.original, self.hyp.get_knobs(self.guest.uuid))

    def test_sigterm_restores_the_original_quota(self):
        during, after, status, said, left = run.sigterm_restores(
            self.hyp, self.guest, self.workdir)
        self.assertEqual(run.expected_quota(10.0)["global_quota"], during["global_quota"])
        self.assertEqual((0, "restored", {}), (status, said, left))
        self.assertEqual(self.original, after)

    def test_after_a_crash_the_next_start_reconciles_from_the_journal(self):
        crashed, left, reconciled, cleared = run.crash_reconciles(
            self.hyp, self.guest, self.workdir)
        self.assertEqual(run.expected_quota(10.0)["global_quota"], crashed["global_quota"])
        self.assertEqual({self.guest.uuid: self.original}, left)
        self.assertEqual((self.original, {}), (reconciled, cleared))

    def test_the_guests_cpu_pressure_is_read_or_said_plainly(self):
        # PSI of the guest's own cgroup v2 group: read where libvirt places it
        # in one (it does on this kind of machine, hybrid v1/v2, under
        # machine/), else the reader says why (e.g. the guest in the v2 root).
        got, why = psi.DomainPressure().read({self.guest.uuid: self.guest.name})
        if got:
            self.assertGreaterEqual(got[self.guest.uuid].some_total_us, 0)
            print("\nPSI of a real guest: %r" % (got[self.guest.uuid],))
        else:
            self.assertIn("cgroup", why[self.guest.uuid])
            print("\nPSI of a real guest: %s" % why[self.guest.uuid])

    def test_a_sweep_reads_a_guest_whose_qemu_does_not_answer(self):
        # libvirt's bulk CPU_TOTAL and VCPU groups ask QEMU's monitor, which a
        # guest capped hard answers late (60-180 ms at 5 %, measured) and a
        # stopped QEMU never: the sweep reads the cgroup and /proc instead.
        # Without that, this sweep waits on the monitor until the watchdog
        # gives up (HypervisorUnavailable).
        self.hyp.set_knobs(self.guest.uuid, 5.0, None)
        dog = watchdog.Watchdog(20.0, name="lab")
        self.addCleanup(dog.close)
        guarded = watchdog.Guarded(self.hyp, dog, owns=False)
        before = guarded.cpu_times()[self.guest.uuid]
        os.kill(self.guest.qemu_pid, signal.SIGSTOP)
        try:
            during = guarded.cpu_times()
            delays = guarded.vcpu_times()
        finally:
            os.kill(self.guest.qemu_pid, signal.SIGCONT)
        self.assertGreaterEqual(during[self.guest.uuid], before)
        self.assertEqual(1, delays[self.guest.uuid].vcpus)

    def test_the_run_delay_read_from_proc_is_libvirts_vcpu_delay(self):
        self.hyp.vms()
        conn = self.hyp.connection.get()
        record, = [record for dom, record in conn.getAllDomainStats(
            libvirt.VIR_DOMAIN_STATS_VCPU | libvirt.VIR_DOMAIN_STATS_CPU_TOTAL,
            libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)
            if dom.UUIDString() == self.guest.uuid]
        cpu = self.hyp.cpu_times()[self.guest.uuid]
        ours = self.hyp.vcpu_times()[self.guest.uuid]
        # Read after libvirt's: never less, and the same thread's figure.
        self.assertEqual(record["vcpu.current"], ours.vcpus)
        self.assertGreaterEqual(ours.delay_ns, record["vcpu.0.delay"])
        self.assertGreaterEqual(cpu, record["cpu.time"])
        print("\nrun delay: libvirt %d ns, /proc %d ns; CPU time: bulk %d ns, cgroup %d ns"
              % (record["vcpu.0.delay"], ours.delay_ns, record["cpu.time"], cpu))

    def test_a_guest_is_adopted_only_once_libvirt_has_started_it(self):
        # Listed as active from its QEMU's first moment, a guest is paused
        # "starting up" while libvirt holds its start job (400-500 ms): a knob
        # write then waits for the job, a scheduler read meets half-made
        # cgroups. The start is watched over a connection of its own; one
        # missed (a loaded machine) is tried again, up to three times.
        conn = libvirt.open(harness.URI)
        self.addCleanup(conn.close)
        watch = libvirt.open(harness.URI)
        self.addCleanup(watch.close)
        starting_up = [libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_STARTING_UP]
        for attempt in range(3):
            guest = harness.Guest("resex-smoke-late", self.lab.kernel, self.lab.initramfs(),
                                  role="idle", workdir=self.workdir)
            self.lab.guests.append(guest)
            starter = threading.Thread(target=guest.start, args=(conn,), daemon=True)
            starter.start()
            seen_starting = adopted_starting = 0
            while starter.is_alive():
                with contextlib.suppress(libvirt.libvirtError):
                    dom = watch.lookupByName(guest.name)
                    if dom.state() == starting_up:
                        seen_starting += 1
                        adopted = dom.UUIDString() in self.hyp.vms()
                        # Still starting once vms() returned: it was throughout.
                        if adopted and dom.state() == starting_up:
                            adopted_starting += 1
                starter.join(0.005)
            adopted = machine.wait_for(lambda: guest.uuid in self.hyp.vms(), 10.0)
            guest.destroy(conn)
            self.lab.guests.remove(guest)
            if seen_starting:
                break
        self.assertGreater(seen_starting, 0, "no start caught in the act in 3 attempts")
        self.assertEqual(0, adopted_starting)
        self.assertTrue(adopted)

    def test_zz_libvirtd_killed_and_restarted_the_hypervisor_carries_on(self):
        seen, readback, opens = run.libvirtd_restart(self.lab, self.hyp, self.guest, cap=20.0)
        self.assertIn("HypervisorUnavailable", seen)
        self.assertEqual(run.expected_quota(20.0)["global_quota"], readback["global_quota"])
        self.assertGreaterEqual(opens, 2)
