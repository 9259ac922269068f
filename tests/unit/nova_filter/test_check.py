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

"""The scheduler-side check: nova.conf as nova-scheduler reads it, a real SQLite board."""

import io
import os
import tempfile
import time
import unittest
from unittest import mock

from resex_libvirt import board as board_mod
from resex_nova import check
from tests.unit.board import reports

ENABLED = """[filter_scheduler]
available_filters = nova.scheduler.filters.all_filters
available_filters = resex_nova.filter.ResExCongestionFilter
enabled_filters = ComputeFilter,ResExCongestionFilter
weight_classes = nova.scheduler.weights.all_weighers,resex_nova.weigher.ResExCongestionWeigher
"""


class SchedulerCheckTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory(prefix="resex-scheduler-check-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.url = "sqlite://%s/board.sqlite" % self.dir
        with board_mod.open_board(self.url) as board:
            board.publish(reports.make("cmp-1"))
            board.publish(reports.make("cmp-2", ts=time.time() - 600))   # stale

    def run_check(self, scheduler=ENABLED, computes=(), url=None, extra=""):
        path = os.path.join(self.dir, "nova.conf")
        with open(path, "w") as f:
            f.write(scheduler + "[resex]\nboard_url = %s\n" % (url or self.url) + extra)
        out = io.StringIO()
        code = check.run_check(check.make_conf([path]), computes, out=out)
        return code, out.getvalue()

    def test_a_ready_scheduler_passes_and_lists_compute_services_without_a_report(self):
        code, text = self.run_check(computes={"cmp-1", "cmp-2", "cmp-3"})
        self.assertEqual(0, code, text)
        self.assertIn("filter: ok (ResExCongestionFilter available and enabled)", text)
        self.assertIn("weigher: ok (ResExCongestionWeigher enabled", text)
        self.assertIn("board: ok (%s, 2 host(s), 1 fresh within 60 s)" % self.url, text)
        self.assertIn("hosts: ok, but 2 of 3 compute service(s) have no fresh report (treated "
                      "as unknown): cmp-2, cmp-3", text)
        self.assertTrue(text.endswith("check passed\n"))

    def test_an_enabled_filter_nova_cannot_load_fails_saying_nova_would_not_start(self):
        code, text = self.run_check(ENABLED.replace(
            "available_filters = resex_nova.filter.ResExCongestionFilter\n", ""))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: filter: ResExCongestionFilter is not in [filter_scheduler] "
                      "available_filters", text)
        self.assertIn("nova-scheduler refuses to start with it enabled", text)

    def test_an_available_filter_not_enabled_fails(self):
        code, text = self.run_check(ENABLED.replace(",ResExCongestionFilter", ""))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: filter: ResExCongestionFilter is available but not in "
                      "[filter_scheduler] enabled_filters", text)

    def test_nova_s_default_weighers_alone_fail(self):
        code, text = self.run_check(ENABLED.replace(
            ",resex_nova.weigher.ResExCongestionWeigher", ""))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: weigher: ResExCongestionWeigher is not in [filter_scheduler] "
                      "weight_classes", text)

    def test_a_class_path_nova_cannot_import_fails_as_configuration(self):
        code, text = self.run_check(ENABLED.replace("resex_nova.filter.ResExCongestionFilter",
                                                    "resex_nova.filtre.ResExCongestionFilter"))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: configuration: cannot load", text)

    def test_a_board_that_is_not_there_fails_and_is_not_created(self):
        url = "sqlite://%s/missing.sqlite" % self.dir
        code, text = self.run_check(url=url)
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: board: [resex] board_url %s:" % url, text)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "missing.sqlite")))

    def test_a_report_under_a_name_nova_does_not_know_fails(self):
        code, text = self.run_check(computes={"cmp-1", "compute-2.example.org"})
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: hosts: 1 host(s) on the board are not Nova compute services: "
                      "cmp-2", text)

    def test_without_compute_names_the_hosts_are_not_compared(self):
        code, text = self.run_check()
        self.assertEqual(0, code, text)
        self.assertIn("hosts: not compared", text)

    def test_the_command_line_takes_names_repeated_or_comma_separated(self):
        path = os.path.join(self.dir, "nova.conf")
        with open(path, "w") as f:
            f.write(ENABLED + "[resex]\nboard_url = %s\n" % self.url)
        out = io.StringIO()
        with mock.patch("sys.stdout", out):
            code = check.main(["--config-file", path, "--host", "cmp-1,cmp-2", "--host",
                               "cmp-3"])
        self.assertEqual(0, code, out.getvalue())
        self.assertIn("2 of 3 compute service(s)", out.getvalue())

    def test_the_topology_file_is_parsed_and_its_hosts_compared_with_nova(self):
        code, text = self.run_check(computes={"cmp-1", "cmp-2"})
        self.assertIn("links: none declared", text)
        topology = os.path.join(self.dir, "topology.yaml")
        with open(topology, "w") as f:
            f.write("links:\n  - {name: up, capacity_gbps: 10, hosts: [cmp-1, cmp-2]}\n")
        extra = "topology_file = %s\n" % topology
        code, text = self.run_check(computes={"cmp-1", "cmp-2"}, extra=extra)
        self.assertEqual(0, code, text)
        self.assertIn("links: ok (1 shared link(s) over 2 host(s) in %s)" % topology, text)
        with open(topology, "w") as f:
            f.write("links:\n  - {name: up, capacity_gbps: 10, hosts: [cmp-1, cmp-9]}\n")
        code, text = self.run_check(computes={"cmp-1", "cmp-2"}, extra=extra)
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: links: 1 host(s) of %s are not Nova compute services: cmp-9"
                      % topology, text)
        with open(topology, "w") as f:
            f.write("links:\n  - {name: up, capacity_gbps: 0, hosts: [cmp-1]}\n")
        code, text = self.run_check(extra=extra)
        self.assertEqual(1, code, text)
        self.assertIn("capacity_gbps must be a number", text)
