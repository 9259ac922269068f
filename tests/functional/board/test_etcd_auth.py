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

"""Write rights per host on a real etcd with its user authentication on.

Each compute node's agent is an etcd user whose role may write only its own
key (``<prefix><host>``); the scheduler's user may read the prefix and
write nothing. The board authenticates with the URL's ``user:password@``
(etcd's JSON gateway takes no user from a certificate's common name). The
users and roles are made here as doc/source/board.rst tells an operator to.
"""

import base64
import unittest

import requests

from resex_libvirt import board as board_mod
from resex_libvirt import exceptions
from tests.functional.board import etcd_server
from tests.unit.board import reports

PREFIX = "/resex/board/"
USERS = {"root": "r00t-pw", "host-a": "a-pw", "host-b": "b-pw", "scheduler": "s-pw"}


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def set_up_auth(base):
    """etcd's users and roles over its JSON API, then ``auth enable``."""
    def post(path, body):
        resp = requests.post(base + "/v3/" + path, json=body, timeout=5)
        resp.raise_for_status()

    for name, password in USERS.items():
        post("auth/user/add", {"name": name, "password": password})
    post("auth/user/grant", {"user": "root", "role": "root"})
    for host in ("host-a", "host-b"):
        post("auth/role/add", {"name": host})
        post("auth/role/grant", {"name": host, "perm": {
            "permType": "READWRITE", "key": _b64(PREFIX + host)}})
        post("auth/user/grant", {"user": host, "role": host})
    post("auth/role/add", {"name": "scheduler"})
    post("auth/role/grant", {"name": "scheduler", "perm": {
        "permType": "READ", "key": _b64(PREFIX),
        "range_end": _b64(PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1))}})
    post("auth/user/grant", {"user": "scheduler", "role": "scheduler"})
    post("auth/enable", {})


@unittest.skipUnless(etcd_server.EtcdServer.available(), "needs Debian's etcd-server")
class EtcdWriteRightsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.etcd = etcd_server.EtcdServer()
        cls.etcd.setUp()
        cls.addClassCleanup(cls.etcd.cleanUp)
        set_up_auth("http://127.0.0.1:%d" % cls.etcd.client_port)

    def board(self, user):
        url = "etcd3+http://%s:%s@127.0.0.1:%d" % (user, USERS[user], self.etcd.client_port)
        board = board_mod.open_board(url, prefix=PREFIX, timeout=5)
        self.addCleanup(board.close)
        return board

    def test_a_host_writes_its_own_key_and_not_another_hosts(self):
        a = self.board("host-a")
        a.publish(reports.make("host-a", sensitive_vms=1))
        with self.assertRaises(exceptions.BoardUnavailable) as ctx:
            a.publish(reports.make("host-b", sensitive_vms=3))
        self.assertIn("permission denied", str(ctx.exception).lower())
        self.board("host-b").publish(reports.make("host-b", sensitive_vms=2))
        seen = self.board("scheduler").snapshot()
        self.assertEqual({"host-a": 1, "host-b": 2},
                         {h: r.sensitive_vms for h, r in seen.items()})

    def test_the_scheduler_reads_and_cannot_write(self):
        with self.assertRaises(exceptions.BoardUnavailable):
            self.board("scheduler").publish(reports.make("host-a"))

    def test_without_credentials_nothing_is_read(self):
        board = board_mod.open_board("etcd3+http://127.0.0.1:%d" % self.etcd.client_port,
                                     prefix=PREFIX, timeout=2)
        self.addCleanup(board.close)
        with self.assertRaises(exceptions.BoardUnavailable):
            board.snapshot()

    def test_a_token_the_member_forgot_is_asked_for_again(self):
        board = self.board("scheduler")
        board.snapshot()
        board._tokens = {i: "forgotten.token" for i in range(len(board.endpoints))}
        self.assertIsInstance(board.snapshot(), dict)
        self.assertNotEqual("forgotten.token", board._tokens[0])

    def test_the_password_is_never_in_the_boards_url(self):
        board = self.board("host-a")
        self.assertNotIn(USERS["host-a"], board.url)
        self.assertNotIn(USERS["host-a"], board_mod.redact(
            "etcd3+http://host-a:%s@127.0.0.1:1" % USERS["host-a"]))
