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

"""``resex-board --watch`` and ``--host`` against a real etcd (Debian's etcd-server)."""

import io
import subprocess
import sys
import unittest

import testtools

from resex_libvirt import board as board_mod
from resex_libvirt.board import resex_board
from tests.functional.board import etcd_server
from tests.unit.board import reports

PREFIX = "/test/cli/"


@unittest.skipUnless(etcd_server.EtcdServer.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class BoardCLIOnEtcdTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.etcd = self.useFixture(etcd_server.EtcdServer())
        with board_mod.open_board(self.etcd.url, prefix=PREFIX, timeout=5) as board:
            board.publish(reports.make("cmp-1", latency_inflation_pct=3.0, sensitive_vms=2))
            board.publish(reports.make("cmp-2", latency_inflation_pct=25.0, heavy_io_vms=1))

    def resex_board(self, *argv):
        return subprocess.run(
            [sys.executable, "-m", "resex_libvirt.board.resex_board", "--url", self.etcd.url,
             "--prefix", PREFIX, "--timeout", "5"] + list(argv),
            capture_output=True, text=True, timeout=120)

    def test_watch_draws_frames_sorted_by_congestion(self):
        res = self.resex_board("--watch", "0.5", "--count", "2")
        self.assertEqual(0, res.returncode, res.stderr)
        frames = res.stdout.split("resex-board every 0.5s on etcd3+http://")[1:]
        self.assertEqual(2, len(frames), res.stdout)
        for frame in frames:
            hosts = [line.split()[0] for line in frame.splitlines()
                     if line.startswith("cmp-")]
            self.assertEqual(["cmp-2", "cmp-1"], hosts)
            self.assertIn("1 closed to latency-sensitive VMs", frame)

    def test_host_shows_one_report_in_full(self):
        res = self.resex_board("--host", "cmp-1")
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn("latency-sensitive VMs:", res.stdout)
        self.assertIn("yes (threshold 10%)", res.stdout)
        res = self.resex_board("--host", "cmp-9")
        self.assertEqual(1, res.returncode)
        self.assertIn("no report from host cmp-9", res.stderr)
        self.assertIn("(hosts: cmp-1, cmp-2)", res.stderr)

    def test_watch_survives_etcd_going_away(self):
        args = resex_board._parser().parse_args(["--url", self.etcd.url, "--prefix", PREFIX,
                                                 "--timeout", "2", "--watch", "1", "--count",
                                                 "2"])
        out = io.StringIO()

        def sleep(seconds):
            self.etcd.kill()

        code = resex_board.watch(args, {"timeout": 2, "create": False, "prefix": PREFIX}, out,
                                 sleep=sleep)
        self.assertEqual(0, code)
        first, second = out.getvalue().split("resex-board every")[1:]
        self.assertNotIn("board unavailable", first)
        self.assertIn("board unavailable (showing the last read)", second)
        self.assertIn("cmp-2", second)


class BoardCLIWithoutEtcdTest(unittest.TestCase):

    def test_an_unreachable_etcd_is_one_line_saying_why_without_eventlets_warning(self):
        proc = subprocess.run(
            [sys.executable, "-m", "resex_libvirt.board.resex_board", "--url",
             "etcd3+http://127.0.0.1:9/", "--timeout", "2"],
            capture_output=True, text=True, timeout=60)
        self.assertNotEqual(0, proc.returncode)
        self.assertNotIn("Eventlet", proc.stderr)
        self.assertIn("connection refused", proc.stderr)
        self.assertEqual(1, len(proc.stderr.strip().splitlines()), proc.stderr)
