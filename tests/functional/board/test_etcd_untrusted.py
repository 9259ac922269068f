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

"""Untrusted records on a real etcd (Debian's etcd-server): the follower's watch drops them."""

import logging
import unittest

import testtools

from resex_libvirt import board as board_mod
from resex_libvirt.board import backend
from resex_libvirt.board import reader as reader_mod
from tests.functional.board import etcd_server
from tests import machine
from tests.unit.board import reports

PREFIX = "/test/board/"


@unittest.skipUnless(etcd_server.EtcdServer.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class EtcdUntrustedRecordsTest(testtools.TestCase):

    def test_the_follower_ignores_a_record_under_another_hosts_key_and_counts_it(self):
        etcd = self.useFixture(etcd_server.EtcdServer())
        board = board_mod.open_board(etcd.url, prefix=PREFIX, timeout=2, lease_ttl=60)
        self.addCleanup(board.close)
        board.publish(reports.make("c1", sensitive_vms=0))
        board.publish(reports.make("c2"))
        reader = reader_mod.BoardReader(etcd.url, refresh_interval=3600, load_timeout=30,
                                        board_opts={"prefix": PREFIX, "timeout": 2})
        self.addCleanup(reader.stop)
        reader.start()
        self.assertEqual({"c1", "c2"}, set(reader.snapshot()))
        with self.assertLogs(backend.LOG, logging.WARNING) as logs:
            # Another node writes c1's name, congested, under c2's key; then junk.
            board._client.put(PREFIX + "c2", reports.make("c1", sensitive_vms=4).to_json())
            board._client.put(PREFIX + "c3", "[" * 5000 + "]" * 3000)
            machine.wait_for(lambda: sum(reader.rejected.values()) == 2, 30,
                             what="the watch delivering both records")
        self.assertEqual({"invalid": 1, "misplaced": 1}, reader.rejected)
        self.assertEqual(0, reader.get("c1").sensitive_vms)
        self.assertIsNone(reader.get("c2"))
        self.assertIn("names host 'c1'", logs.output[0])
        # The watch goes on: c2's agent publishes again and is read.
        board.publish(reports.make("c2", sensitive_vms=1))
        machine.wait_for(lambda: reader.get("c2") is not None
                         and reader.get("c2").sensitive_vms == 1, 30, what="c2 read again")
        self.assertFalse(reader.failing)
