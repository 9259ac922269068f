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

"""The [resex] options: registration and the config generator's view."""

import unittest

from oslo_config import cfg

from resex_nova import conf


class ConfTest(unittest.TestCase):

    def test_register_opts_is_idempotent_and_defaults_are_safe(self):
        c = cfg.ConfigOpts()
        conf.register_opts(c)
        conf.register_opts(c)
        c([])
        self.assertEqual("last", c.resex.unknown_host_policy)
        self.assertEqual([], c.resex.strict_moves)
        self.assertEqual("follow", c.resex.board_read_mode)
        self.assertEqual("sqlite:///var/lib/resex/board.sqlite", c.resex.board_url)
        self.assertEqual(-1, c.resex.bulk_max_sensitive_vms)

    def test_list_opts_names_the_resex_group_and_every_option(self):
        [(group, opts)] = conf.list_opts()
        self.assertEqual("resex", group.name)
        names = {o.name for o in opts}
        self.assertLessEqual(set(conf.AGGREGATE_KEYS), names)
        for opt in opts:
            self.assertTrue(opt.help and opt.help.strip(), opt.name)

    def test_strict_moves_only_takes_move_kinds(self):
        c = cfg.ConfigOpts()
        conf.register_opts(c)
        c([])
        c.set_override("strict_moves", ["resize", "unshelve"], "resex")
        self.assertEqual(["resize", "unshelve"], c.resex.strict_moves)
        self.assertRaises(ValueError, c.set_override, "strict_moves", ["boot"], "resex")

    def test_unknown_host_policy_only_takes_last_pass_or_fail(self):
        c = cfg.ConfigOpts()
        conf.register_opts(c)
        c([])
        self.assertRaises(ValueError, c.set_override, "unknown_host_policy", "maybe", "resex")
