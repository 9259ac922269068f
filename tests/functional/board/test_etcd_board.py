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

"""The etcd board against a real etcd (Debian's etcd-server) on loopback."""

import functools
import logging
import socket
import threading
import time
import unittest

from etcd3gw import exceptions as etcd_exc
import testtools

from resex_libvirt import board as board_mod
from resex_libvirt.board import etcd as etcd_board
from resex_libvirt.board import reader as reader_mod
from resex_libvirt import exceptions
from tests.functional.board import etcd_server
from tests import machine
from tests.unit.board import reports


#: Poll a predicate until true; its last (false) value if it never became true.
wait_until = functools.partial(machine.wait_for, timeout=30.0, step=0.1)


@unittest.skipUnless(etcd_server.EtcdServer.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class EtcdBoardTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.etcd = self.useFixture(etcd_server.EtcdServer())
        self.board = board_mod.open_board(self.etcd.url, prefix="/test/board/", timeout=2,
                                          lease_ttl=60)
        self.addCleanup(self.board.close)

    def test_open_board_picks_etcd_by_scheme(self):
        self.assertIsInstance(self.board, etcd_board.EtcdBoard)
        self.assertEqual("/test/board/", self.board.prefix)
        self.assertEqual(2.0, self.board._client.timeout)

    def test_publish_then_one_snapshot_returns_every_host(self):
        for i in range(5):
            self.board.publish(reports.make("c%d" % i, link_utilisation=i / 10.0))
        self.board.publish(reports.make("c3", link_utilisation=0.9))
        snap = self.board.snapshot()
        self.assertEqual({"c0", "c1", "c2", "c3", "c4"}, set(snap))
        self.assertEqual(0.9, snap["c3"].link_utilisation)
        self.assertEqual(5, self.board.count())

    def test_keys_outside_the_prefix_and_corrupt_values_are_ignored(self):
        self.board.publish(reports.make("c1"))
        client = self.board._client
        client.put("/test/board/bad", "{\"version\": 7}")
        client.put("/test/board/liar", reports.make("c1").to_json())
        client.put("/test/boardx/c9", reports.make("c9").to_json())
        self.assertEqual({"c1"}, set(self.board.snapshot()))

    def test_url_query_overrides_prefix_timeout_and_ttl(self):
        board = board_mod.open_board(self.etcd.url + "?prefix=/q&timeout=0.5&lease_ttl=7")
        self.addCleanup(board.close)
        self.assertEqual(("/q/", 0.5, 7), (board.prefix, board.timeout, board.lease_ttl))
        board.publish(reports.make("q1"))
        self.assertEqual({"q1"}, set(board.snapshot()))
        self.assertEqual({}, self.board.snapshot())

    def test_a_key_outliving_its_agent_is_stale_by_ts(self):
        now = time.time()
        self.board.publish(reports.make("old", ts=now - 600))
        self.board.publish(reports.make("new", ts=now))
        reader = reader_mod.BoardReader(self.etcd.url, max_age=60, refresh_interval=3600,
                                        board_opts={"prefix": "/test/board/"})
        self.addCleanup(reader.stop)
        reader.start()
        self.assertIn("old", self.board.snapshot())  # the key exists...
        self.assertIsNone(reader.get("old"))       # ...but the report is stale
        self.assertEqual({"new"}, set(reader.snapshot()))

    def test_the_lease_collects_the_key_of_a_dead_agent(self):
        board = board_mod.open_board(self.etcd.url, prefix="/test/board/", lease_ttl=1)
        self.addCleanup(board.close)
        board.publish(reports.make("dies"))
        self.assertIn("dies", self.board.snapshot())
        # The agent dies: nobody refreshes its lease.
        self.assertTrue(wait_until(lambda: "dies" not in self.board.snapshot()))

    def test_a_lost_lease_is_granted_again_on_publish(self):
        self.board.publish(reports.make("c1"))
        lost = self.board._lease.id
        self.board._lease.revoke()  # behind the board's back: the key goes too
        self.assertEqual({}, self.board.snapshot())
        self.board.publish(reports.make("c1"))
        self.assertNotEqual(lost, self.board._lease.id)
        self.assertIn("c1", self.board.snapshot())

    def test_withdraw_removes_the_hosts_key_now(self):
        self.board.publish(reports.make("c1"))
        self.board.withdraw()
        self.assertEqual({}, self.board.snapshot())

    def test_outage_raises_board_unavailable_and_recovers(self):
        self.board.publish(reports.make("c1"))
        self.etcd.kill()
        for call in (self.board.snapshot, lambda: self.board.publish(reports.make("c1")),
                     self.board.count):
            with testtools.ExpectedException(exceptions.BoardUnavailable):
                call()
        try:
            self.board.snapshot()
        except exceptions.BoardUnavailable as exc:
            self.assertIsInstance(exc.__cause__, etcd_exc.Etcd3Exception)
            # etcd3gw's own error has no message: the reason comes from its cause.
            self.assertIn("connection refused", str(exc))
        self.etcd.start()
        self.assertEqual({"c1"}, set(self.board.snapshot()))  # data and lease survived
        self.board.publish(reports.make("c2"))
        self.assertEqual({"c1", "c2"}, set(self.board.snapshot()))

    def test_the_reader_serves_the_last_snapshot_through_an_outage(self):
        self.board.publish(reports.make("c1", sensitive_vms=3))
        reader = reader_mod.BoardReader(self.etcd.url, max_age=600, refresh_interval=3600,
                                        board_opts={"prefix": "/test/board/", "timeout": 1},
                                        mode="snapshot")
        self.addCleanup(reader.stop)
        reader.start()
        self.etcd.kill()
        with self.assertLogs(reader_mod.LOG, logging.WARNING) as logs:
            self.assertFalse(reader.refresh())
            self.assertFalse(reader.refresh())
        self.assertEqual(1, len(logs.records))
        self.assertEqual(3, reader.get("c1").sensitive_vms)
        self.etcd.start()
        self.board.publish(reports.make("c1", sensitive_vms=4))
        self.assertTrue(reader.refresh())
        self.assertEqual(4, reader.get("c1").sensitive_vms)

    def test_the_follower_sees_puts_and_deletes_through_its_watch(self):
        self.board.publish(reports.make("c1", sensitive_vms=1))
        seen = []
        reader = reader_mod.BoardReader(self.etcd.url, max_age=600, refresh_interval=3600,
                                        board_opts={"prefix": "/test/board/", "timeout": 1},
                                        on_change=lambda recs: seen.append(dict(recs)))
        self.addCleanup(reader.stop)
        reader.start()
        self.assertEqual(1, reader.get("c1").sensitive_vms)
        # No refresh() and a refresh interval of an hour: only the watch can deliver these.
        self.board.publish(reports.make("c1", sensitive_vms=2))
        self.board.publish(reports.make("c2"))
        self.assertTrue(wait_until(lambda: reader.get("c2") is not None
                                   and reader.get("c1").sensitive_vms == 2))
        # The later batches carried only the changed hosts.
        self.assertEqual({"c1"}, set(seen[0]))
        self.assertTrue(all(len(batch) <= 2 for batch in seen[1:]))
        self.board.withdraw()
        self.assertTrue(wait_until(lambda: reader.get("c1") is None))

    def test_the_follower_resyncs_after_etcd_restarts(self):
        self.board.publish(reports.make("c1", sensitive_vms=1))
        reader = reader_mod.BoardReader(self.etcd.url, max_age=600, refresh_interval=0.2,
                                        board_opts={"prefix": "/test/board/", "timeout": 1})
        self.addCleanup(reader.stop)
        reader.start()
        self.etcd.kill()
        self.assertTrue(wait_until(lambda: reader.failing))
        self.assertEqual(1, reader.get("c1").sensitive_vms)
        self.etcd.start()
        self.board.publish(reports.make("c1", sensitive_vms=4))
        self.assertTrue(wait_until(lambda: reader.get("c1").sensitive_vms == 4))
        self.assertTrue(wait_until(lambda: not reader.failing))

    def test_the_follower_starts_over_when_its_revision_was_compacted(self):
        self.board.publish(reports.make("c1", sensitive_vms=1))
        stop = threading.Event()
        follow = self.board.follow(stop)
        full, recs = next(follow)
        self.assertTrue(full)
        for n in range(3):
            self.board.publish(reports.make("c1", sensitive_vms=2 + n))
        # Compact away the history the watch would start from.
        client = self.board._client
        rev = int(client.post(client.get_url("/kv/range"), json={
            "key": etcd_board._b64(b"/x")})["header"]["revision"])
        client.post(client.get_url("/kv/compaction"), json={"revision": rev})
        batches = [next(follow) for _ in range(1)]
        stop.set()
        self.assertTrue(batches[-1][0])
        self.assertEqual(4, batches[-1][1]["c1"].sensitive_vms)

    def test_every_call_has_a_timeout(self):
        # A server that accepts connections and never answers.
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(16)
            url = "etcd3+http://127.0.0.1:%d" % silent.getsockname()[1]
            board = board_mod.open_board(url, timeout=0.3)
            self.addCleanup(board.close)
            for call in (board.snapshot, lambda: board.publish(reports.make("c1")),
                         board.count):
                with testtools.ExpectedException(exceptions.BoardUnavailable):
                    call()

    def test_a_malformed_etcd_url_is_a_config_error(self):
        for url in ("etcd3+http://", "etcd3+http://h:notaport", "etcd3+http://h?timeout=x"):
            self.assertRaises(exceptions.ConfigError, board_mod.open_board, url)
