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

"""The [libvirt] and [sla] option groups."""

import unittest

from oslo_config import cfg

from resex_agent.conf import hypervisor as hyp_conf
from resex_agent import hypervisor as agent_hypervisor
from resex_libvirt import exceptions
from resex_libvirt import sla


class HypervisorConfTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = cfg.ConfigOpts()
        hyp_conf.register_opts(self.conf)
        self.conf([], project="resex-test")

    def test_defaults(self):
        self.assertEqual("qemu:///system", self.conf.libvirt.connection_uri)
        self.assertEqual(sla.SLA(), agent_hypervisor.sla_defaults(self.conf))

    def test_every_resex_key_has_a_default_option_with_its_range(self):
        opts = {opt.name: opt for opt in hyp_conf.SLA_OPTS}
        self.assertEqual(set(sla.KEYS), {sla.PREFIX + name for name in opts})
        for name, opt in opts.items():
            key = sla.KEYS[sla.PREFIX + name]
            self.assertEqual(key.default, opt.default, name)
            if key.min is not None and key.type is not str:
                self.assertEqual(key.min, opt.type.min, name)
                self.assertEqual(key.max, opt.type.max, name)

    def test_out_of_range_default_is_refused_by_oslo(self):
        with self.assertRaises(ValueError):
            self.conf.set_override("shares", 0, group="sla")

    def test_sla_defaults_from_conf(self):
        self.conf.set_override("cpu_reservation_pct", 20.0, group="sla")
        self.conf.set_override("io_class", "bulk", group="sla")
        defaults = agent_hypervisor.sla_defaults(self.conf)
        self.assertEqual((20.0, "bulk"), (defaults.reservation_pct, defaults.io_class))

    def test_contradictory_defaults_are_a_config_error(self):
        self.conf.set_override("cpu_reservation_pct", 50.0, group="sla")
        self.conf.set_override("cpu_limit_pct", 20.0, group="sla")
        with self.assertRaises(exceptions.ConfigError):
            agent_hypervisor.sla_defaults(self.conf)

    def test_list_opts_names_both_groups(self):
        groups = [group.name for group, _opts in hyp_conf.list_opts()]
        self.assertEqual(["libvirt", "sla"], groups)


class CgroupVersionTest(unittest.TestCase):
    """The agent detects the host's cgroup version from a (temporary) cgroup root."""

    def test_a_unified_hierarchy_is_cgroup_v2_anything_else_v1(self):
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as root:
            self.assertEqual(1, agent_hypervisor.cgroup_version(root))
            with open(os.path.join(root, "cgroup.controllers"), "w") as f:
                f.write("cpuset cpu io memory pids\n")
            self.assertEqual(2, agent_hypervisor.cgroup_version(root))
