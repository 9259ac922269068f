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

"""``python -m resex_nova.check`` against a real etcd board (Debian's etcd-server)."""

import os
import subprocess
import sys
import unittest

import fixtures
import testtools

from resex_libvirt import board as board_mod
from tests.functional.board import etcd_server
from tests.unit.board import reports
from tests.unit.nova_filter import test_check

PREFIX = "/test/scheduler-check/"


@unittest.skipUnless(etcd_server.EtcdServer.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class SchedulerCheckOnEtcdTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.etcd = self.useFixture(etcd_server.EtcdServer())
        with board_mod.open_board(self.etcd.url, prefix=PREFIX, timeout=5) as board:
            board.publish(reports.make("cmp-1"))
            board.publish(reports.make("cmp-2"))
        self.dir = self.useFixture(fixtures.TempDir()).path

    def check(self, url, *hosts):
        path = os.path.join(self.dir, "nova.conf")
        with open(path, "w") as f:
            f.write(test_check.ENABLED + "[resex]\nboard_url = %s\netcd_prefix = %s\n"
                    "board_timeout = 2\n" % (url, PREFIX))
        argv = [sys.executable, "-m", "resex_nova.check", "--config-file", path]
        for host in hosts:
            argv += ["--host", host]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def test_the_boards_hosts_match_novas_compute_services(self):
        res = self.check(self.etcd.url, "cmp-1,cmp-2")
        self.assertEqual(0, res.returncode, res.stdout + res.stderr)
        self.assertIn("board: ok (%s, 2 host(s), 2 fresh within 60 s)" % self.etcd.url,
                      res.stdout)
        self.assertIn("hosts: ok (every one of 2 compute service(s) reports)", res.stdout)

    def test_an_agent_publishing_under_another_name_fails(self):
        res = self.check(self.etcd.url, "cmp-1", "cmp-2.example.org")
        self.assertEqual(1, res.returncode, res.stdout)
        self.assertIn("ERROR: hosts: 1 host(s) on the board are not Nova compute services: "
                      "cmp-2", res.stdout)

    def test_etcd_down_fails_naming_the_board(self):
        self.etcd.kill()
        res = self.check(self.etcd.url, "cmp-1")
        self.assertEqual(1, res.returncode, res.stdout)
        self.assertIn("ERROR: board: [resex] board_url %s:" % self.etcd.url, res.stdout)
