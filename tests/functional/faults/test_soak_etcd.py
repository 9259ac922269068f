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

"""The soak's etcd parts on a real 3-member cluster (no lab): its figures, its restarts."""

import types
import unittest

import testtools

from tests.faults import soak
from tests.faults import soak_schedule as schedule
from tests.functional.board import etcd_cluster


@unittest.skipUnless(etcd_cluster.EtcdCluster.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class SoakEtcdTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.cluster = self.useFixture(etcd_cluster.EtcdCluster())
        self.lab = types.SimpleNamespace(etcd=self.cluster)

    def put(self, key):
        self.cluster.ask("kv/put", {"key": key, "value": "eA=="})

    def test_the_revision_and_the_db_size_are_read_from_the_members(self):
        before = soak.etcd_figures(self.cluster)
        self.put("c29hazE=")
        after = soak.etcd_figures(self.cluster)
        self.assertEqual(before["etcd_revision"] + 1, after["etcd_revision"])
        self.assertGreater(after["etcd_db_bytes"], 0)

    def test_the_leader_then_a_follower_restart_and_the_cluster_goes_on(self):
        for index, role in ((0, "leader"), (1, "follower")):
            leader = self.cluster.leader()
            note = soak.restart_etcd(self.lab, schedule.Event(0.0, schedule.ETCD_RESTART,
                                                              index), down_s=0.2)
            self.assertIn("(%s)" % role, note)
            restarted = int(note[1:note.index(" ")])
            self.assertEqual(role == "leader", restarted == leader, note)
            self.assertEqual([0, 1, 2], self.cluster.live())
        revision = soak.etcd_figures(self.cluster)["etcd_revision"]
        self.put("c29hazI=")
        self.assertEqual(revision + 1, soak.etcd_figures(self.cluster)["etcd_revision"])

    def test_a_stopped_member_is_not_asked_and_the_others_answer(self):
        self.cluster.stop(2)
        got = soak.etcd_figures(self.cluster)
        self.assertIsNotNone(got["etcd_revision"])
