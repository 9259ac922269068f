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

"""``[fabric]`` options, the agent's factory that turns them into a monitor, and the
library's plain-argument factory under it."""

import unittest

from oslo_config import cfg

from resex_agent.conf import fabric as fabric_conf
from resex_agent import fabric as agent_fabric
from resex_libvirt import exceptions
from resex_libvirt import fabric
from resex_libvirt.fabric import ib_sysfs
from resex_libvirt.fabric import libvirt_iface
from resex_libvirt.fabric import vf_netlink
from tests.unit.fabric import sysfs_tree


def make_conf(test, **overrides):
    """A fresh ConfigOpts with ``[fabric]``; overrides are undone after ``test``.

    oslo.config shares a registered group's options between ConfigOpts
    instances (``register_group`` copies the group shallowly), so an
    override left behind would leak into the next test.
    """
    conf = cfg.ConfigOpts()
    fabric_conf.register_opts(conf)
    conf([], project="resex-test")
    test.addCleanup(conf.reset)
    for name, value in overrides.items():
        conf.set_override(name, value, group="fabric")
    return conf


class TestOptions(unittest.TestCase):

    def test_list_opts_names_the_group_and_every_option(self):
        [(group, opts)] = fabric_conf.list_opts()
        self.assertEqual("fabric", group.name)
        self.assertEqual({"source", "sysfs_root", "port_owners", "link_port", "pf_netdev",
                          "uplink_netdev", "link_capacity_gbps", "link_mtu", "count_peers"},
                         {o.name for o in opts})

    def test_source_choices_are_the_factory_sources(self):
        source = [o for o in fabric_conf.fabric_opts if o.name == "source"][0]
        self.assertEqual(set(fabric.SOURCES), {c for c, _ in source.type.choices.items()})

    def test_out_of_range_values_are_refused(self):
        conf = make_conf(self)
        self.assertRaises(ValueError, conf.set_override, "link_mtu", 100, group="fabric")
        self.assertRaises(ValueError, conf.set_override, "source", "ibmon", group="fabric")


class TestBuild(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.tree = sysfs_tree.SysfsTree()
        self.addCleanup(self.tree.cleanup)
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0")

    def test_ib_sysfs_from_conf_carries_owners_and_overrides(self):
        conf = make_conf(self, source="ib_sysfs", sysfs_root=self.tree.root,
                         port_owners=["mlx5_0:1=vm-a"], link_capacity_gbps=8.0, link_mtu=2048)
        monitor = agent_fabric.build(conf)
        self.assertIsInstance(monitor, ib_sysfs.IBPortCounters)
        self.assertEqual({("mlx5_0", 1): "vm-a"}, monitor.port_map)
        link = monitor.link()
        self.assertEqual((1e9, 2048), (link.capacity_bytes_per_s, link.mtu))

    def test_vf_netlink_from_conf_uses_the_pf(self):
        conf = make_conf(self, source="vf_netlink", pf_netdev="ib0", sysfs_root=self.tree.root)
        monitor = agent_fabric.build(conf)
        self.addCleanup(monitor.close)
        self.assertIsInstance(monitor, vf_netlink.VFNetlinkMonitor)
        self.assertEqual("ib0", monitor.pf)

    def test_libvirt_iface_needs_a_connection(self):
        conf = make_conf(self, source="libvirt_iface")
        self.assertRaises(exceptions.ConfigError, agent_fabric.build, conf)
        monitor = agent_fabric.build(conf, connection=lambda: None)
        self.assertIsInstance(monitor, libvirt_iface.LibvirtInterfaceStats)

    def test_none_means_no_monitor_and_simulated_is_not_built_here(self):
        self.assertIsNone(agent_fabric.build(make_conf(self)))
        self.assertRaises(exceptions.ConfigError, fabric.build, "simulated")
        self.assertRaises(exceptions.ConfigError, fabric.build, "ibmon")

    def test_bad_owner_entries_are_config_errors(self):
        for item in ("mlx5_0:1", "=vm", "mlx5_0:1="):
            self.assertRaises(exceptions.ConfigError, fabric.parse_port_owners, [item])

    def test_a_bad_owner_in_the_config_names_the_option(self):
        conf = make_conf(self, source="ib_sysfs", sysfs_root=self.tree.root,
                         port_owners=["mlx5_0:1"])
        with self.assertRaisesRegex(exceptions.ConfigError, r"\[fabric\] port_owners"):
            agent_fabric.build(conf)

    def test_the_library_builds_a_monitor_from_plain_arguments(self):
        monitor = fabric.build("ib_sysfs", sysfs_root=self.tree.root,
                               port_map=fabric.parse_port_owners(["mlx5_0:1=vm-a"]))
        self.assertEqual({("mlx5_0", 1): "vm-a"}, monitor.port_map)
