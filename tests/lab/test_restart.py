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

"""Lab smoke test: the real agent, killed with -9 while it caps a real guest, controls again.

A CPU-burning TCG guest declares ``resex:cpu_limit_pct`` in its metadata, so
the agent holds it under a cap for as long as it runs. The agent is killed
with SIGKILL while capping (its journal holds the guest's originals) and
started again: it reconciles from the journal (restores Nova's values) and
must then list the guests and cap the guest again, which before the fix it
never did (every epoch said ``0 VMs``). The caps are read from libvirt and
from the guest's cgroup, not from the agent. The restart's timeline
(restore, first cap after the restart) is printed, not asserted.
"""

import signal
import time
import unittest

import libvirt

from tests.lab import base
from tests.lab import harness
from tests import machine

LIMIT_PCT = 20
OPERATOR_SHARES = 5000


class KillNineRestartTest(base.LabTestCase):

    @classmethod
    def set_up_lab(cls):
        initrd = cls.lab.initramfs()
        cls.bulk = cls.capped_burner("resex-restart-bulk", LIMIT_PCT, initrd)
        cls.idle = cls.lab.guest("resex-restart-idle", initrd, role="idle")
        cls.conn = cls.connect()
        cls.original = cls.knobs(cls.bulk)
        cls.agent = cls.agent_process("restart")
        cls.run_restart()

    @classmethod
    def knobs(cls, guest):
        return harness.knobs(cls.conn, guest)

    @classmethod
    def capped(cls):
        return cls.knobs(cls.bulk)["global_quota"] > 0

    @classmethod
    def run_restart(cls):
        cls.agent.start(vms=2)
        cls.capped_first = machine.wait_for(cls.capped, 30.0)
        cls.before_kill = cls.knobs(cls.bulk)
        cls.agent.proc.send_signal(signal.SIGKILL)
        cls.agent.proc.wait(30)
        cls.agent.proc = None
        cls.journal_at_kill = cls.agent.journal_left()
        cls.after_kill = cls.knobs(cls.bulk)   # the kernel keeps the dead agent's cap
        with open(cls.agent.log_path, "a") as f:
            f.write("---- restarted after kill -9 ----\n")
        started = time.monotonic()
        cls.agent.start(vms=2)
        restored = machine.wait_for(lambda: not cls.capped(), 15.0, step=0.005)
        cls.restored_s = time.monotonic() - started if restored else None
        cls.recapped = machine.wait_for(cls.capped, 30.0, step=0.005)
        cls.recapped_s = time.monotonic() - started if cls.recapped else None
        cls.cgroup_recapped = harness.cgroup_cpu_quota(cls.bulk)
        time.sleep(2.5)    # two more epochs
        cls.log_after_restart = cls.agent.log().split("---- restarted after kill -9 ----")[-1]
        cls.run_operator_change()
        cls.exit_code = cls.agent.stop()
        cls.after_stop = cls.knobs(cls.bulk)
        cls.operator_after_stop = cls.agent.journal_operator()
        # A clean stop, a start: the operator's value is still the original.
        cls.agent.start(vms=2)
        cls.recapped_after_clean_restart = machine.wait_for(cls.capped, 30.0)
        time.sleep(1.5)
        cls.shares_after_clean_restart = cls.knobs(cls.bulk)["cpu_shares"]
        cls.second_exit_code = cls.agent.stop()
        cls.after_second_stop = cls.knobs(cls.bulk)
        print("\nkill -9 restart on the real libvirtd: start -> originals restored %s, "
              "-> capped again %s (limit %d%%)" % (
                  "%.0f ms" % (1000 * cls.restored_s) if cls.restored_s is not None else "never",
                  "%.0f ms" % (1000 * cls.recapped_s) if cls.recapped_s is not None else "never",
                  LIMIT_PCT))

    @classmethod
    def run_operator_change(cls):
        """``virsh schedinfo --live cpu_shares=...`` while the agent caps the guest."""
        dom = cls.conn.lookupByUUIDString(cls.bulk.uuid)
        dom.setSchedulerParametersFlags({"cpu_shares": OPERATOR_SHARES},
                                        libvirt.VIR_DOMAIN_AFFECT_LIVE)
        cls.operator_journaled = machine.wait_for(
            lambda: cls.agent.journal_operator().get(cls.bulk.uuid), 15.0)
        time.sleep(3.0)       # thirty intervals: time enough to write it back
        cls.after_operator = cls.knobs(cls.bulk)

    def test_the_agent_capped_the_guest_before_it_was_killed(self):
        self.assertTrue(self.capped_first, self.agent.log())
        self.assertIn(self.bulk.uuid, self.journal_at_kill)
        self.assertTrue(self.after_kill["global_quota"] > 0, self.after_kill)

    def test_after_the_restart_the_agent_caps_the_guest_again_in_libvirt_and_the_cgroup(self):
        self.assertTrue(self.recapped, self.log_after_restart)
        cap = 100.0 * self.cgroup_recapped[1] / self.cgroup_recapped[0]
        self.assertLessEqual(cap, LIMIT_PCT + 0.5, self.cgroup_recapped)

    def test_after_the_restart_every_epoch_counts_both_guests(self):
        epochs = [line for line in self.log_after_restart.splitlines() if " epoch " in line
                  or line.startswith("epoch ")]
        self.assertTrue(epochs, self.log_after_restart)
        for line in epochs:
            self.assertNotIn(" 0 VMs", line)

    def test_an_operators_live_change_is_adopted_journaled_and_never_written_back(self):
        self.assertEqual({"cpu_shares": OPERATOR_SHARES},
                         (self.operator_journaled or {}).get("values"), self.agent.log())
        self.assertEqual(OPERATOR_SHARES, self.after_operator["cpu_shares"])
        self.assertGreater(self.after_operator["global_quota"], 0, "the cap was dropped")

    def test_sigterm_restores_the_originals_with_the_operators_value(self):
        expected = dict(self.original, cpu_shares=OPERATOR_SHARES)
        self.assertEqual(0, self.exit_code)
        self.assertEqual(expected, self.after_stop)
        self.assertEqual({}, self.agent.journal_left())
        self.assertIn(self.bulk.uuid, self.operator_after_stop)

    def test_the_operators_value_survives_a_restart_of_the_agent(self):
        self.assertTrue(self.recapped_after_clean_restart)
        self.assertEqual(OPERATOR_SHARES, self.shares_after_clean_restart)
        self.assertEqual(0, self.second_exit_code)
        self.assertEqual(dict(self.original, cpu_shares=OPERATOR_SHARES),
                         self.after_second_stop)


if __name__ == "__main__":
    unittest.main()
