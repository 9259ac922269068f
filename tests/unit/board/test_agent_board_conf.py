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

"""The agent's [board] options turn into a working board and publish policy."""

import os
import tempfile
import unittest

from oslo_config import cfg

from resex_agent.conf import board as board_conf
from resex_libvirt.board import open_board
from resex_libvirt.board import sqlite as sqlite_board
from tests.unit.board import reports


class AgentBoardConfTest(unittest.TestCase):

    def setUp(self):
        self.conf = cfg.ConfigOpts()
        board_conf.register_opts(self.conf)
        self.conf([])

    def test_defaults_match_the_nova_side(self):
        from resex_nova import conf as nova_side
        nova = cfg.ConfigOpts()
        nova_side.register_opts(nova)
        nova([])
        self.assertEqual(nova.resex.board_url, self.conf.board.url)
        self.assertEqual(nova.resex.etcd_prefix, self.conf.board.etcd_prefix)
        self.assertLess(self.conf.board.max_publish_interval, nova.resex.max_age)
        self.assertLess(self.conf.board.max_publish_interval, self.conf.board.lease_ttl)

    def test_board_options_open_a_board_that_publishes(self):
        with tempfile.TemporaryDirectory() as tmp:
            url = "sqlite://" + os.path.join(tmp, "b.sqlite")
            with open_board(url, **board_conf.board_options(self.conf)) as board:
                self.assertIsInstance(board, sqlite_board.SQLiteBoard)
                self.assertEqual(120.0, board.ttl)
                board.publish(reports.make("c1"))
                self.assertEqual({"c1"}, set(board.snapshot()))

    def test_publish_policy_follows_the_options(self):
        self.conf.set_override("publish_on_change_fleet_size", 10, "board")
        self.conf.set_override("max_publish_interval", 5.0, "board")
        policy = board_conf.publish_policy(self.conf)
        self.assertEqual((10, 5.0), (policy.on_change_fleet_size, policy.max_interval_s))

    def test_list_opts_names_the_board_group(self):
        [(group, opts)] = board_conf.list_opts()
        self.assertEqual("board", group)
        self.assertIn("lease_ttl", {o.name for o in opts})
