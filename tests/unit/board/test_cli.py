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

"""resex-board: the board as a table or JSON, stale hosts marked."""

import contextlib
import io
import json
import os
import tempfile
import time
import unittest

from resex_libvirt.board import cli
from resex_libvirt.board import open_board
from tests.unit.board import reports


class BoardCLITest(unittest.TestCase):

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="resex-cli-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.url = "sqlite://" + os.path.join(tmp.name, "board.sqlite")
        with open_board(self.url) as board:
            board.publish(reports.make("c1", link_utilisation=0.5, sensitive_vms=2,
                                       io_price=2.5))
            board.publish(reports.make("c2", ts=time.time() - 120, heavy_io_vms=1))

    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err):
            code = cli.main(list(argv), out=out)
        return code, out.getvalue(), err.getvalue()

    def test_the_table_shows_every_host_with_its_index_and_marks_stale_ones(self):
        code, out, _ = self.run_cli("--url", self.url, "--max-age", "60")
        self.assertEqual(0, code)
        header, c1, c2, summary = out.splitlines()
        self.assertEqual(["HOST", "AGE_S", "UTIL_%", "UNTAX_%", "CPU_PRICE", "IO_PRICE",
                          "INFL_%", "CI_%", "SENS", "HEAVY", "VMS", "STATE"], header.split())
        self.assertEqual(["c1", "50.0", "50.0", "1", "2.5", "0.0", "100.0", "2", "0", "4",
                          "ok"],
                         c1.split()[:1] + c1.split()[2:])
        self.assertEqual("STALE", c2.split()[-1])
        self.assertIn("2 hosts, 1 stale", summary)

    def test_json_carries_the_report_fields_age_index_and_staleness(self):
        code, out, _ = self.run_cli("--url", self.url, "--json", "--max-age", "300")
        self.assertEqual(0, code)
        doc = json.loads(out)
        self.assertEqual(["c1", "c2"], [h["host"] for h in doc["hosts"]])
        self.assertEqual(100.0, doc["hosts"][0]["congestion_index_pct"])
        self.assertEqual([False, False], [h["stale"] for h in doc["hosts"]])
        self.assertGreaterEqual(doc["hosts"][1]["age_s"], 120)

    def test_a_missing_board_is_an_error_and_is_not_created(self):
        missing = os.path.join(self.dir, "nope", "board.sqlite")
        code, out, err = self.run_cli("--url", "sqlite://" + missing)
        self.assertEqual(1, code)
        self.assertIn("resex-board: cannot open the SQLite board", err)
        self.assertFalse(os.path.exists(missing))

    def test_a_bad_url_is_an_error(self):
        code, _, err = self.run_cli("--url", "mysql://db")
        self.assertEqual(1, code)
        self.assertIn("unknown board URL scheme", err)
