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

"""The VF statistics request against this machine's real kernel.

There is no SR-IOV device here, but ``RTM_GETLINK`` with
``RTEXT_FILTER_VF`` is answered by every kernel for every netdev: on the
loopback device the reply carries no ``IFLA_VFINFO_LIST``, and an unknown
name is answered with ``ENODEV``. This exercises the socket, the
pyroute2-encoded request and the pyroute2 decoding of a genuine kernel
reply end to end.
"""

import unittest

from pyroute2.netlink.rtnl import marshal

from resex_libvirt import exceptions
from resex_libvirt.fabric import vf_netlink


class TestRtnetlinkSource(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.source = vf_netlink.RtnetlinkSource(timeout=5.0)
        self.addCleanup(self.source.close)

    def test_kernel_answers_for_loopback_with_its_name_and_no_vfs(self):
        data = self.source("lo")
        msgs = list(marshal.MarshalRtnl().parse(data))
        self.assertEqual("lo", msgs[0].get_attr("IFLA_IFNAME"))
        self.assertEqual({}, vf_netlink.parse_vf_stats(data))

    def test_unknown_netdev_is_a_fabric_error(self):
        self.assertRaises(exceptions.FabricError, vf_netlink.parse_vf_stats,
                          self.source("resexnone0"))

    def test_socket_is_reused_across_requests(self):
        self.source("lo")
        sock = self.source._sock
        self.source("lo")
        self.assertIs(sock, self.source._sock)

    def test_monitor_on_a_pf_without_vfs_has_no_endpoints(self):
        monitor = vf_netlink.VFNetlinkMonitor("lo", source=self.source)
        self.assertEqual([], monitor.endpoints({}))
        self.assertEqual({}, monitor.counters({}))
