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

"""The etcd board's decoding of range reads and watch streams, on bytes, without a server.

:class:`CannedEtcd`, a requests transport adapter mounted on the board's own
session (etcd3gw's), answers ``/version``, ``/kv/range`` and ``/watch`` with
bodies shaped as etcd's JSON gateway sends them (base64 keys and values,
int64 as strings, one JSON message per line on the watch stream), so
:meth:`EtcdBoard.snapshot` and :meth:`EtcdBoard.follow` run their real
decoding on hostile values and keys. The real etcd is
``tests/functional/board/``.
"""

import base64
import io
import json
import random
import threading
import types
import unittest
import urllib.parse

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import requests

from resex_libvirt import board as board_mod
from tests.unit.board import fuzz_records
from tests.unit.board import hostile
from tests.unit.board import reports

PREFIX = "/resex/board/"


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def kv(key, value, revision):
    """One key-value as the gateway writes it (etcd omits an empty value)."""
    key = key if isinstance(key, bytes) else (PREFIX + key).encode()
    out = {"key": _b64(key), "mod_revision": str(revision), "create_revision": "2",
           "version": "1"}
    if value:
        out["value"] = _b64(value)
    return out


def put(key, value, revision):
    return {"kv": kv(key, value, revision)}  # PUT is the default type: the gateway omits it


def delete(key, revision):
    return {"type": "DELETE", "kv": {"key": kv(key, b"", revision)["key"],
                                     "mod_revision": str(revision)}}


def message(events, revision):
    return json.dumps({"result": {"header": {"revision": str(revision)}, "events": events}})


class _Sock:
    def settimeout(self, seconds):
        pass


class _Raw(io.BytesIO):
    """A canned body whose socket takes a read timeout, as a live stream's does."""

    connection = types.SimpleNamespace(sock=_Sock())


class CannedEtcd(requests.adapters.BaseAdapter):
    """Answers the board's requests with canned bodies; the last watch sets ``stop``."""

    def __init__(self, range_kvs, watch_bodies, stop, revision=10):
        super().__init__()
        self.range_body = json.dumps({"header": {"revision": str(revision)},
                                      "kvs": range_kvs, "count": str(len(range_kvs))})
        self.watch_bodies = list(watch_bodies)
        self.stop = stop
        self.revision = revision

    def send(self, request, **kwargs):
        path = urllib.parse.urlsplit(request.url).path
        if path == "/version":
            body = '{"etcdserver": "3.4.23", "etcdcluster": "3.4.0"}'
        elif path.endswith("/kv/range"):
            body = self.range_body
        elif path.endswith("/watch") and self.watch_bodies:
            created = json.dumps({"result": {"header": {"revision": str(self.revision)},
                                             "created": True}})
            body = created + "\n" + self.watch_bodies.pop(0)
        else:
            self.stop.set()  # the canned stream is over: end follow()
            body = ""
        resp = requests.Response()
        resp.status_code = 200
        resp.raw = _Raw(body.encode() if isinstance(body, str) else body)
        resp.url = request.url
        resp.request = request
        return resp

    def close(self):
        pass


class EtcdDecodingTest(unittest.TestCase):

    def board(self, range_kvs, watch_bodies=()):
        """An etcd board whose session talks to :class:`CannedEtcd`, and its stop event."""
        board = board_mod.open_board("etcd3+http://127.0.0.1:2379", prefix=PREFIX, timeout=1)
        self.addCleanup(board.close)
        stop = threading.Event()
        board._client.session.mount("http://", CannedEtcd(range_kvs, watch_bodies, stop))
        return board, stop

    def test_a_put_under_another_hosts_key_is_ignored_and_counted(self):
        genuine = reports.make("c1", sensitive_vms=0).to_json().encode()
        forged = reports.make("c1", sensitive_vms=4).to_json().encode()
        board, stop = self.board(
            [kv("c1", genuine, 5), kv("c2", reports.make("c2").to_json().encode(), 6)],
            [message([put("c2", forged, 11)], 11)])
        batches = list(board.follow(stop))
        self.assertEqual([(True, {"c1", "c2"}), (False, {"c2"})],
                         [(full, set(recs)) for full, recs in batches])
        self.assertEqual(0, batches[0][1]["c1"].sensitive_vms)
        self.assertIsNone(batches[1][1]["c2"])
        self.assertEqual({"invalid": 0, "misplaced": 1}, board.rejected)

    def test_watch_messages_that_are_not_objects_are_skipped(self):
        good = reports.make("c2", sensitive_vms=3).to_json().encode()
        body = "\n".join(["[]", "5", json.dumps({"result": []}),
                          json.dumps({"result": {"header": [], "events": [7, {"kv": []}]}}),
                          message([put("c2", good, 12)], 12)])
        board, stop = self.board([kv("c1", reports.make("c1").to_json().encode(), 5)], [body])
        batches = list(board.follow(stop))
        self.assertEqual([(True, {"c1"}), (False, {"c2"})],
                         [(full, set(recs)) for full, recs in batches])
        self.assertEqual(3, batches[1][1]["c2"].sensitive_vms)

    def test_a_range_read_drops_forged_broken_and_undecodable_keys(self):
        board, _ = self.board([
            kv("c1", reports.make("c1").to_json().encode(), 3),
            kv("c2", reports.make("c1").to_json().encode(), 4),
            kv("c3", b"[" * 5000 + b"]" * 3000, 5),
            kv("c4", b"", 6),
            kv(PREFIX.encode() + b"\xff", reports.make("\ufffd").to_json().encode(), 7)])
        self.assertEqual({"c1"}, set(board.snapshot()))
        self.assertEqual({"invalid": 2, "misplaced": 2}, board.rejected)

    @settings(max_examples=30, deadline=None, database=None)
    @given(st.integers(0, 2 ** 64))
    def test_hostile_keys_and_values_never_raise_and_only_valid_records_pass(self, seed):
        rng = random.Random(seed)
        hosts = ["c0", "c1", "c2", "c3"]
        expect, revision = {}, 10
        range_kvs = []
        for host in hosts:
            raw, expect[host] = hostile.record(rng, host)
            range_kvs.append(kv(host, raw, 3))
        bodies = []
        for _ in range(rng.randrange(1, 4)):
            lines = []
            for _ in range(rng.randrange(1, 4)):
                events = []
                for host in rng.sample(hosts, rng.randrange(1, 4)):
                    revision += 1
                    if rng.random() < 0.15:
                        events.append(delete(host, revision))
                        expect[host] = "deleted"
                    else:
                        raw, expect[host] = hostile.record(rng, host)
                        events.append(put(host, raw, revision))
                lines.append(message(events, revision))
            bodies.append("\n".join(lines))
        board, stop = self.board(range_kvs, bodies)
        state = {}
        for full, recs in board.follow(stop):
            if full:
                state = {}
            state.update(recs)
        for host, rec in state.items():
            if rec is not None:
                fuzz_records.check_report(rec, host)
        for host, expected in expect.items():
            if expected == hostile.VALID:
                self.assertIsNotNone(state.get(host), host)
            elif expected is not None:
                self.assertIsNone(state.get(host), host)
