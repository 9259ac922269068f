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

"""The knob journal: originals recorded once, atomically, restored on stop or after a crash.

The hypervisor is the project's simulated host (a real ``Hypervisor``
implementation with Xen-credit knobs); the libvirt path is run in the lab.
"""

import json
import os
import tempfile
import unittest

from resex_agent import journal as journal_mod
from resex_libvirt import exceptions
from resex_libvirt.sim import host as sim_host
from resex_libvirt.sim import scenario as scenario_mod


class JournalTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.path = os.path.join(self.dir.name, "state", "journal.json")
        self.host = sim_host.SimHost(scenario_mod.load("paper_64k_vs_2m"))
        self.uuids = sorted(self.host.vms())

    def test_remember_records_only_the_first_originals(self):
        journal = journal_mod.Journal(self.path)
        self.assertTrue(journal.remember("a", {"cap": 0, "weight": 256}))
        self.assertFalse(journal.remember("a", {"cap": 30, "weight": 256}))
        self.assertEqual({"a": {"cap": 0, "weight": 256}}, journal.originals())
        self.assertIn("a", journal)
        self.assertNotIn("b", journal)

    def test_update_replaces_only_a_recorded_vm_and_forget_drops_it(self):
        journal = journal_mod.Journal(self.path)
        self.assertFalse(journal.update("a", {"cap": 0, "weight": 512}))
        journal.remember("a", {"cap": 0, "weight": 256})
        self.assertTrue(journal.update("a", {"cap": 0, "weight": 512}))
        self.assertEqual({"a": {"cap": 0, "weight": 512}},
                         journal_mod.Journal(self.path).originals())
        journal.forget("a")
        self.assertEqual({}, journal_mod.Journal(self.path).originals())

    def test_an_unreadable_journal_says_how_to_recover_from_the_persistent_definitions(self):
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "w") as f:
            f.write("{not json")
        with self.assertRaises(journal_mod.JournalCorrupt) as ctx:
            journal_mod.Journal(self.path)
        self.assertIn("persistent definition", str(ctx.exception))
        self.assertNotIn("move it away", str(ctx.exception))

    def test_records_survive_a_new_process(self):
        journal_mod.Journal(self.path).remember("a", {"cap": 0, "weight": 256})
        self.assertEqual({"a": {"cap": 0, "weight": 256}},
                         journal_mod.Journal(self.path).originals())

    def test_writes_leave_no_temporary_files(self):
        journal = journal_mod.Journal(self.path)
        journal.remember("a", {"cap": 0})
        journal.remember("b", {"cap": 0})
        journal.forget("a")
        self.assertEqual(["journal.json"], os.listdir(os.path.dirname(self.path)))
        with open(self.path) as f:
            self.assertEqual({"version": 1, "originals": {"b": {"cap": 0}}}, json.load(f))

    def test_an_operators_live_values_outlive_a_clean_stop_and_end_with_the_vm(self):
        journal = journal_mod.Journal(self.path)
        uuid = self.uuids[0]
        journal.remember(uuid, self.host.get_knobs(uuid))
        journal.set_operator(uuid, {"cpu_shares": 5000}, dom_id=7)
        self.assertEqual({}, journal.restore_all(self.host))
        kept = journal_mod.Journal(self.path)
        self.assertEqual({}, kept.originals())
        self.assertEqual({uuid: {"dom_id": 7, "values": {"cpu_shares": 5000}}},
                         kept.operator_values())
        kept.set_operator(uuid, {}, dom_id=8)            # the domain restarted
        self.assertEqual({}, journal_mod.Journal(self.path).operator_values())
        kept.set_operator(uuid, {"cpu_shares": 700}, dom_id=8)
        kept.forget(uuid)                                # the domain stopped
        self.assertEqual({}, journal_mod.Journal(self.path).operator_values())

    def test_a_journal_without_operator_values_still_loads(self):
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "w") as f:
            json.dump({"version": 1, "originals": {"a": {"cap": 0}}}, f)
        journal = journal_mod.Journal(self.path)
        self.assertEqual(({"a": {"cap": 0}}, {}), (journal.originals(),
                                                   journal.operator_values()))

    def test_malformed_operator_values_are_a_clear_error(self):
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "w") as f:
            json.dump({"version": 1, "originals": {}, "operator": {"a": [1]}}, f)
        with self.assertRaises(journal_mod.JournalCorrupt) as ctx:
            journal_mod.Journal(self.path)
        self.assertIn('"operator"', str(ctx.exception))

    def test_restore_all_writes_originals_back_and_clears(self):
        uuid = self.uuids[0]
        journal = journal_mod.Journal(self.path)
        journal.remember(uuid, self.host.get_knobs(uuid))
        original = self.host.get_knobs(uuid)
        self.host.set_knobs(uuid, 25.0, 512)
        self.assertNotEqual(original, self.host.get_knobs(uuid))
        self.assertEqual({}, journal.restore_all(self.host))
        self.assertEqual(original, self.host.get_knobs(uuid))
        self.assertEqual({}, journal_mod.Journal(self.path).originals())

    def test_reconcile_after_a_crash_restores_what_the_dead_agent_changed(self):
        uuid = self.uuids[1]
        original = self.host.get_knobs(uuid)
        crashed = journal_mod.Journal(self.path)
        crashed.remember(uuid, original)
        self.host.set_knobs(uuid, 10.0, None)
        del crashed
        journal_mod.Journal(self.path).reconcile(self.host)
        self.assertEqual(original, self.host.get_knobs(uuid))

    def test_vms_gone_are_dropped_without_error(self):
        journal = journal_mod.Journal(self.path)
        journal.remember("not-on-this-host", {"cap": 0, "weight": 256})
        with self.assertLogs("resex_agent.journal", level="DEBUG") as logs:
            self.assertEqual({}, journal.restore_all(self.host))
        self.assertIn("not-on-this-host", "\n".join(logs.output))
        self.assertEqual({}, journal.originals())

    def test_a_failed_restore_keeps_its_record_for_the_next_start(self):
        uuid = self.uuids[0]
        journal = journal_mod.Journal(self.path)
        journal.remember(uuid, {"cap": "not-a-number"})
        failed = journal.restore_all(self.host)
        self.assertIsInstance(failed[uuid], exceptions.HypervisorError)
        self.assertEqual({uuid: {"cap": "not-a-number"}},
                         journal_mod.Journal(self.path).originals())

    def test_corrupt_journal_is_a_clear_error_naming_the_file(self):
        os.makedirs(os.path.dirname(self.path))
        for content in (b"{not json", b"", b'{"version": 9, "originals": {}}',
                        b'{"version": 1, "originals": {"a": 3}}'):
            with open(self.path, "wb") as f:
                f.write(content)
            with self.assertRaises(journal_mod.JournalCorrupt) as ctx:
                journal_mod.Journal(self.path)
            self.assertIn(self.path, str(ctx.exception))
            self.assertIsInstance(ctx.exception, exceptions.ResexError)
            with open(self.path, "rb") as f:
                self.assertEqual(content, f.read(), "a corrupt journal must not be overwritten")
