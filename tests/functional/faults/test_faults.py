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

"""The agent under the faults of an operator's bad day, with short outages.

Each test runs one fault of :mod:`tests.faults.scenarios` (real agent
processes, a real SQLite file locked by another process, a real etcd
stopped with SIGSTOP, a real full filesystem; the host is the product's
simulated host following the wall clock, and a hung libvirtd is that host
behind a hypervisor whose calls block, see :mod:`tests.faults.harness`).
``make faults`` runs the same faults at full length and prints the table.
"""

import os
import unittest

from tests.faults import scenarios
from tests.functional.board import etcd_server

# The watchdog bound of the hung-libvirtd faults, in control intervals (0.1 s each).
WATCHDOG_S = 0.5
WATCHDOG_INTERVALS = round(WATCHDOG_S / 0.1)
OUTAGE_S = 3.0
OUTAGE_INTERVALS = round(OUTAGE_S / 0.1)


class FaultCase(unittest.TestCase):
    """What a fault may cost, stated so that a loaded machine cannot fail it.

    Intervals lost are counted on a shared 2-core machine, where another
    process can stall the loop too: the rules are structural (the loop never
    waits on the board) or bounded far below what the fault used to cost
    (the whole outage).
    """

    def assertBoardFaultHandled(self, r):
        self.assertFalse(r.loop_waited, "the control loop called the board itself")
        self.assertLess(r.lost, OUTAGE_INTERVALS // 2, r)
        self.assertEqual((0, 0), (r.held, r.wrong), r)


class BoardFaultTest(FaultCase):

    def test_a_sqlite_board_locked_by_another_process_costs_no_interval(self):
        r = scenarios.sqlite_locked(outage=OUTAGE_S)
        self.assertBoardFaultHandled(r)
        self.assertLess(r.recovery_s, 30.0, "no report was published once the lock was gone")

    def test_a_corrupt_sqlite_board_at_start_is_controlled_locally_then_published(self):
        r = scenarios.sqlite_corrupt_at_start(outage=1.0)
        self.assertBoardFaultHandled(r)
        self.assertLess(r.recovery_s, 60.0, "the board was never opened once repaired")


@unittest.skipUnless(etcd_server.EtcdServer.available(), "etcd-server is not installed")
class EtcdFaultTest(FaultCase):

    def test_etcd_stopped_with_sigstop_costs_no_interval(self):
        r = scenarios.etcd_stopped(outage=OUTAGE_S)
        self.assertBoardFaultHandled(r)
        self.assertLess(r.recovery_s, 30.0)

    def test_etcd_down_at_start_is_controlled_locally_then_published(self):
        r = scenarios.etcd_down_at_start(outage=OUTAGE_S)
        self.assertBoardFaultHandled(r)
        self.assertLess(r.recovery_s, 60.0)


class HungHypervisorTest(unittest.TestCase):

    def test_a_hung_libvirtd_costs_at_most_the_watchdog_bound_and_holds_the_knobs(self):
        r = scenarios.libvirt_hung(outage=OUTAGE_S, call_timeout_s=WATCHDOG_S)
        # The loop stalls for one watchdog bound, not for the outage.
        self.assertLess(r.lost, max(2 * WATCHDOG_INTERVALS, OUTAGE_INTERVALS // 2), r)
        self.assertGreater(r.held, 0, "the outage was not seen as one")
        self.assertEqual(0, r.wrong, r)
        self.assertLess(r.recovery_s, 30.0)

    def test_a_silent_libvirtd_at_start_is_a_one_line_failure_not_a_hang(self):
        r = scenarios.libvirt_hung_at_start()
        proc = r.details["proc"]
        self.assertEqual(1, proc.returncode, proc.stderr)
        self.assertIn("did not return within", proc.stderr)
        self.assertEqual(1, len(proc.stderr.strip().splitlines()), proc.stderr)

    def test_sigterm_while_libvirtd_hangs_exits_keeps_the_journal_and_the_next_start_restores(
            self):
        r = scenarios.sigterm_while_hung(outage=2.0, call_timeout_s=WATCHDOG_S)
        self.assertIn("2 VM(s) kept in the journal", r.note)
        self.assertEqual(0, r.wrong, r)


@unittest.skipUnless(os.geteuid() == 0, "mounting a full tmpfs needs root")
class JournalFaultTest(unittest.TestCase):

    def test_a_full_state_directory_caps_anyway_and_loses_no_original(self):
        r = scenarios.journal_full(outage=2.0)
        self.assertEqual((0, 0), (r.held, r.wrong), r)
        self.assertIn("2 VM(s) held in memory", r.note)
        self.assertLess(r.recovery_s, 30.0, "the journal was not written once space was back")


class ProcessFaultTest(unittest.TestCase):

    def test_a_second_agent_exits_at_once_naming_the_first_and_touches_nothing(self):
        r = scenarios.two_agents()
        second = r.details["second"]
        self.assertEqual(1, second.returncode, second.stderr)
        self.assertIn("(pid %d)" % r.details["first_pid"], second.stderr)
        self.assertEqual(1, len(second.stderr.strip().splitlines()), second.stderr)
        self.assertEqual(0, r.wrong, "the first agent lost its socket or died")

    def test_a_second_agent_with_another_state_directory_refuses_too(self):
        r = scenarios.two_agents(other_state_dir=True)
        second = r.details["second"]
        self.assertEqual(1, second.returncode, second.stderr)
        self.assertIn("(pid %d)" % r.details["first_pid"], second.stderr)
        self.assertIn("the host's", second.stderr)
        self.assertEqual(0, r.wrong, "the first agent lost its socket or died")

    def test_start_failures_are_one_line_and_an_exit_code(self):
        for name, proc in scenarios.start_failures().items():
            with self.subTest(name):
                self.assertIn(proc.returncode, (1, 2), proc.stderr)
                self.assertNotIn("Traceback", proc.stderr + proc.stdout)
                self.assertEqual(1, len(proc.stderr.strip().splitlines()), proc.stderr)
                self.assertTrue(proc.stderr.startswith("resex-agent: "), proc.stderr)


class SocketFaultTest(unittest.TestCase):

    def test_idle_probe_connections_never_lock_an_honest_probe_out(self):
        r = scenarios.slow_loris(idle=32)
        self.assertEqual(0, r.wrong, r)
