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

"""The etcd board naming every member of a real 3-member etcd cluster: a cloud's bad days.

The leader killed, a member stopped, the quorum lost, a member wiped and
added again, the history compacted: publishing resumes, the follower
resumes, the agent's lease is kept, and a report older than the reader's
bound is never served. Waits poll with generous bounds; nothing is timed.
"""

import functools
import http.server
import json
import socket
import threading
import unittest

from etcd3gw import exceptions as etcd_exc
import hypothesis
from hypothesis import strategies as st
import testtools

from resex_agent import publisher as publisher_mod
from resex_libvirt import board as board_mod
from resex_libvirt.board import etcd as etcd_board
from resex_libvirt.board import reader as reader_mod
from resex_libvirt import exceptions
from tests.functional.board import etcd_cluster
from tests.functional.board import etcd_server
from tests import machine
from tests.unit.board import reports

#: Poll a predicate until true; its last (false) value if it never became true.
wait_until = functools.partial(machine.wait_for, timeout=90.0, step=0.1)

PREFIX = "/test/board/"
#: A stream quiet for 2 s is re-opened (on the next member): a stopped member is left soon.
OPTS = {"prefix": PREFIX, "timeout": 2.0, "lease_ttl": 60, "watch_idle": 2.0}


def published(board, report):
    """Publish ``report``: True if it landed, False if the board was unavailable."""
    try:
        board.publish(report)
        return True
    except exceptions.BoardUnavailable:
        return False


def vms_of(reader, host="c1"):
    """The ``sensitive_vms`` of ``host``'s fresh report in ``reader``, or None."""
    rec = reader.get(host)
    return None if rec is None else rec.sensitive_vms


_HOSTS = st.one_of(
    st.from_regex(r"[a-z0-9]([a-z0-9-]{0,12}[a-z0-9])?(\.[a-z0-9]{1,8}){0,2}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: "[%s]" % a))
_MEMBERS = st.lists(st.tuples(_HOSTS, st.integers(1, 65535)), min_size=1, max_size=5,
                    unique_by=lambda m: m)


class MemberListTest(testtools.TestCase):
    """The board URL naming every member: parsed, validated, redacted (no etcd needed)."""

    def test_every_member_is_asked_in_order_with_2379_by_default(self):
        board = board_mod.open_board("etcd3+http://10.0.0.1:2379,etcd-b,[fd00::3]:32379/?x=1")
        self.addCleanup(board.close)
        self.assertEqual([("10.0.0.1", 2379), ("etcd-b", 2379), ("fd00::3", 32379)],
                         board.members)
        self.assertEqual("etcd3+http://10.0.0.1:2379,etcd-b:2379,[fd00::3]:32379/", board.url)
        self.assertEqual("10.0.0.1:2379", board.member)

    def test_a_malformed_member_list_is_a_config_error_naming_the_member(self):
        for url, word in (("etcd3+http://a:2379,,b:2379", "''"),
                          ("etcd3+http://a:2379,b:x", "'x'"),
                          ("etcd3+http://a:2379,b:70000", "'70000'"),
                          ("etcd3+http://a:2379,a:2379", "named twice"),
                          ("etcd3+http://a:2379,fd00::1:2379", "brackets"),
                          ("etcd3+http://a:2379,[fd00::1", "IPv6"),
                          ("etcd3+http://a:2379,b c:1", "'b c:1'"),
                          ("etcd3+http://a:2379,b:1:2", "'b:1:2'")):
            with testtools.ExpectedException(exceptions.ConfigError, ".*%s.*" % word):
                board_mod.open_board(url)

    @hypothesis.given(_MEMBERS, st.booleans())
    @hypothesis.settings(max_examples=60, deadline=None)
    def test_any_member_list_round_trips_and_its_credentials_never_reach_logs(
            self, members, credentials):
        netloc = ",".join("%s:%d" % m for m in members)
        url = "etcd3+https://%s%s/p?prefix=/q/" % ("user:s3cret@" if credentials else "",
                                                   netloc)
        board = board_mod.open_board(url)
        try:
            self.assertEqual([(h.strip("[]").lower(), p) for h, p in members], board.members)
            self.assertEqual("etcd3+https://%s/p" % netloc.lower(), board.url)
            self.assertEqual("/q/", board.prefix)
        finally:
            board.close()
        self.assertEqual("etcd3+https://%s/p?prefix=/q/" % netloc, board_mod.redact(url))


class _Answering(http.server.BaseHTTPRequestHandler):
    """An etcd gateway that answers every POST with ``server.answer`` (status, etcd error)."""

    def do_GET(self):
        self._reply(200, {"etcdserver": "3.4.23", "etcdcluster": "3.4.0"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.posts += 1
        status, error = self.server.answer
        self._reply(status, {"error": error, "message": error, "code": 14})

    def _reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def _answering(test, status, error):
    """A fake member answering every call with ``status`` and etcd's ``error``; its endpoint."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answering)
    server.answer, server.posts = (status, error), 0
    thread = threading.Thread(target=server.serve_forever, name="fake-etcd", daemon=True)
    thread.start()
    test.addCleanup(server.server_close)
    test.addCleanup(server.shutdown)
    return server, "127.0.0.1:%d" % server.server_address[1]


@unittest.skipUnless(etcd_server.EtcdServer.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class FailoverTest(testtools.TestCase):
    """A call that one member cannot serve is served by the next, within the timeout."""

    def setUp(self):
        super().setUp()
        self.etcd = self.useFixture(etcd_server.EtcdServer())
        self.live = "127.0.0.1:%d" % self.etcd.client_port

    def board(self, *endpoints, **opts):
        board = board_mod.open_board("etcd3+http://" + ",".join(endpoints), **dict(OPTS, **opts))
        self.addCleanup(board.close)
        return board

    def test_a_refused_member_hands_every_call_to_the_next(self):
        board = self.board("127.0.0.1:%d" % etcd_server.free_port(), self.live)
        board.publish(reports.make("c1"))
        self.assertEqual({"c1"}, set(board.snapshot()))
        self.assertEqual(1, board.count())
        self.assertEqual(self.live, board.member)

    def test_a_member_that_never_answers_costs_a_share_of_the_timeout_not_the_call(self):
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(16)
            board = self.board("127.0.0.1:%d" % silent.getsockname()[1], self.live, timeout=6.0)
            board.publish(reports.make("c1"))
            self.assertEqual(self.live, board.member)
            self.assertEqual({"c1"}, set(board.snapshot()))

    def test_a_member_without_a_leader_hands_the_call_to_the_next(self):
        server, leaderless = _answering(self, 503, "etcdserver: no leader")
        board = self.board(leaderless, self.live)
        board.publish(reports.make("c1"))
        self.assertEqual(self.live, board.member)
        self.assertEqual(1, server.posts)

    def test_a_lone_member_without_a_leader_is_asked_again_within_the_timeout(self):
        server, leaderless = _answering(self, 503, "etcdserver: no leader")
        board = self.board(leaderless, timeout=1.0)
        with self.assertRaises(exceptions.BoardUnavailable) as ctx:
            board.publish(reports.make("c1"))
        self.assertIn("no leader", str(ctx.exception))
        self.assertGreater(server.posts, 1)

    def test_an_answer_about_the_request_is_final_no_other_member_is_asked(self):
        server, refusing = _answering(self, 400, "etcdserver: request is too large")
        board = self.board(refusing, self.live)
        with self.assertRaises(exceptions.BoardUnavailable) as ctx:
            board.publish(reports.make("c1"))
        self.assertIn("request is too large", str(ctx.exception))
        self.assertEqual((1, refusing), (server.posts, board.member))
        self.assertEqual(0, self.board(self.live).count())

    def test_when_every_member_fails_the_error_names_each_and_keeps_the_cause(self):
        dead = ["127.0.0.1:%d" % etcd_server.free_port() for _ in range(2)]
        board = self.board(*dead)
        with self.assertRaises(exceptions.BoardUnavailable) as ctx:
            board.publish(reports.make("c1"))
        for endpoint in dead:
            self.assertIn(endpoint + " connection refused", str(ctx.exception))
        self.assertIsInstance(ctx.exception.__cause__, etcd_exc.Etcd3Exception)

    def test_a_lost_lease_is_still_granted_again(self):
        board = self.board("127.0.0.1:%d" % etcd_server.free_port(), self.live)
        board.publish(reports.make("c1"))
        lost = board._lease.id
        board._lease.revoke()
        board.publish(reports.make("c1"))
        self.assertNotEqual(lost, board._lease.id)
        self.assertIn("c1", board.snapshot())


@unittest.skipUnless(etcd_cluster.EtcdCluster.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class EtcdClusterTest(testtools.TestCase):
    """An agent's board and a scheduler's reader on every member of a 3-member cluster."""

    def setUp(self):
        super().setUp()
        self.cluster = self.useFixture(etcd_cluster.EtcdCluster())

    def board(self, url, **opts):
        board = board_mod.open_board(url, **dict(OPTS, **opts))
        self.addCleanup(board.close)
        return board

    def reader(self, url, max_age=600.0):
        reader = reader_mod.BoardReader(url, max_age=max_age, refresh_interval=0.2,
                                        load_timeout=30.0, board_opts=dict(OPTS))
        self.addCleanup(reader.stop)
        return reader.start()

    def test_the_leader_killed_publishing_and_following_resume_on_the_same_lease(self):
        leader = self.cluster.leader()
        now = [0.0]
        board = self.board(self.cluster.first(leader), clock=lambda: now[0])
        board.publish(reports.make("c1", sensitive_vms=1))
        lease = board._lease.id
        reader = self.reader(self.cluster.first(leader))
        self.assertTrue(wait_until(lambda: vms_of(reader) == 1))
        self.cluster.kill(leader)
        now[0] = 1000.0     # the next publish keeps the lease alive, through another member
        self.assertTrue(wait_until(
            lambda: published(board, reports.make("c1", sensitive_vms=2))))
        self.assertNotEqual(leader, self.cluster.index_of(board.member))
        self.assertEqual(lease, board._lease.id)
        self.assertTrue(wait_until(lambda: vms_of(reader) == 2))

    def test_a_member_stopped_then_continued_is_left_then_rejoins(self):
        stopped = self.cluster.follower()
        board = self.board(self.cluster.first(stopped))
        reader = self.reader(self.cluster.first(stopped))
        board.publish(reports.make("c1", sensitive_vms=1))
        self.assertTrue(wait_until(lambda: vms_of(reader) == 1))
        self.cluster.pause(stopped)
        self.assertTrue(wait_until(
            lambda: published(board, reports.make("c1", sensitive_vms=2))))
        self.assertNotEqual(stopped, self.cluster.index_of(board.member))
        self.assertTrue(wait_until(lambda: vms_of(reader) == 2))
        self.cluster.resume(stopped)
        self.cluster.wait_healthy(stopped)
        self.assertTrue(wait_until(
            lambda: published(board, reports.make("c1", sensitive_vms=3))))
        self.assertTrue(wait_until(lambda: vms_of(reader) == 3))
        alone = self.board(self.cluster.url_of([stopped]))
        self.assertTrue(wait_until(lambda: _vms_on(alone) == 3))

    def test_quorum_lost_publish_fails_the_agent_goes_on_and_stale_reports_are_never_served(self):
        max_age = 5.0
        board = self.board(self.cluster.url)
        publisher = publisher_mod.Publisher(board)
        self.addCleanup(publisher.close, 5.0)
        reader = self.reader(self.cluster.url, max_age=max_age)
        # Fresh reports until the reader serves one (it must be younger than max_age).
        self.assertTrue(wait_until(lambda: published(board, reports.make("c1", sensitive_vms=1))
                                   and vms_of(reader) == 1))
        sampler = etcd_cluster.ReaderSampler(reader, "c1", max_age)
        self.addCleanup(sampler.stop)
        kept = self.cluster.follower()
        down = [i for i in range(3) if i != kept]
        for i in down:
            self.cluster.kill(i)
        self.assertRaises(exceptions.BoardUnavailable, board.publish,
                          reports.make("c1", sensitive_vms=2))
        # The agent's publisher takes the report and returns; its thread fails.
        publisher.offer(reports.make("c1", sensitive_vms=2))
        self.assertTrue(wait_until(lambda: publisher.failures >= 1))
        self.assertEqual(0, publisher.published)
        # The last report ages past the bound: the reader stops serving it.
        self.assertTrue(wait_until(lambda: reader.get("c1") is None))
        for i in down:
            self.cluster.start(i)
        self.assertTrue(wait_until(
            lambda: published(board, reports.make("c1", sensitive_vms=3))))
        publisher.offer(reports.make("c1", sensitive_vms=4))
        self.assertTrue(wait_until(lambda: publisher.published >= 1))
        self.assertTrue(wait_until(lambda: vms_of(reader) == 4))
        sampler.stop()
        self.assertEqual([], sampler.stale)
        self.assertGreater(sampler.samples, 0)

    def test_the_follower_resumes_through_compaction_and_defragmentation(self):
        board = self.board(self.cluster.url)
        board.publish(reports.make("c1", vms=20, sensitive_vms=1))
        reader = self.reader(self.cluster.url)
        self.assertTrue(wait_until(lambda: vms_of(reader) == 1))
        for n in range(5):
            board.publish(reports.make("c1", vms=20, sensitive_vms=2 + n))
        self.cluster.compact()
        self.cluster.defragment()
        self.assertTrue(wait_until(
            lambda: published(board, reports.make("c1", vms=20, sensitive_vms=10))))
        self.assertTrue(wait_until(lambda: vms_of(reader) == 10))

    def test_a_watch_resumed_on_another_member_below_the_compaction_reads_the_board_again(self):
        board = self.board(self.cluster.url)
        board.publish(reports.make("c1", sensitive_vms=1))
        stop = threading.Event()
        follow = board.follow(stop)
        self.addCleanup(follow.close)
        self.addCleanup(stop.set)
        self.assertTrue(next(follow)[0])
        watched = self.cluster.index_of(board.member)
        for n in range(3):
            board.publish(reports.make("c1", sensitive_vms=2 + n))
        self.cluster.kill(watched)
        self.cluster.compact()
        full, records = next(follow)
        self.assertTrue(full)
        self.assertEqual(4, records["c1"].sensitive_vms)
        self.assertNotEqual(watched, self.cluster.index_of(board.member))

    def test_a_member_wiped_and_added_again_serves_the_board_and_the_lease(self):
        wiped = self.cluster.follower()
        board = self.board(self.cluster.first(wiped))
        reader = self.reader(self.cluster.first(wiped))
        board.publish(reports.make("c1", sensitive_vms=1))
        lease = board._lease.id
        self.assertTrue(wait_until(lambda: vms_of(reader) == 1))
        self.cluster.replace(wiped)
        self.assertTrue(wait_until(
            lambda: published(board, reports.make("c1", sensitive_vms=2))))
        self.assertTrue(wait_until(lambda: vms_of(reader) == 2))
        self.assertEqual(lease, board._lease.id)
        alone = self.board(self.cluster.url_of([wiped]))
        self.assertTrue(wait_until(lambda: _vms_on(alone) == 2))
        # The re-added member holds the key on the same lease.
        key = etcd_board._b64((PREFIX + "c1").encode())
        kvs = alone._call("range read", "/kv/range", {"key": key})["kvs"]
        self.assertEqual(lease, int(kvs[0]["lease"]))


def _vms_on(board, host="c1"):
    try:
        rec = board.snapshot().get(host)
    except exceptions.BoardUnavailable:
        return None
    return None if rec is None else rec.sensitive_vms
