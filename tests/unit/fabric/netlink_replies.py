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

"""RTM_NEWLINK replies with per-VF statistics, encoded by pyroute2's own ``ifinfmsg``.

There is no SR-IOV HCA on the build machines. These bytes are produced by
the same pyroute2 message classes that decode the kernel's replies, with
the kernel's nesting (``IFLA_VFINFO_LIST`` -> ``IFLA_VF_INFO`` ->
``IFLA_VF_MAC`` carrying the VF index, ``IFLA_VF_STATS`` -> 64-bit
``IFLA_VF_STATS_*``), so the monitor decodes them exactly as it would
decode a real PF's answer.
"""

import errno
import struct

from pyroute2.netlink import NLMSG_ERROR
from pyroute2.netlink.rtnl import ifinfmsg as ifinfmsg_mod
from pyroute2.netlink.rtnl import RTM_NEWLINK

from resex_libvirt.fabric import vf_netlink


def vf_info(index, tx_bytes=0, tx_packets=0, rx_bytes=0, rx_packets=0, stats=True):
    attrs = [("IFLA_VF_MAC", {"vf": index, "mac": "00:00:00:00:00:00"}),
             ("IFLA_VF_VLAN", {"vf": index, "vlan": 0, "qos": 0})]
    if stats:
        attrs.append(("IFLA_VF_STATS", {"attrs": [
            ("IFLA_VF_STATS_RX_PACKETS", rx_packets),
            ("IFLA_VF_STATS_TX_PACKETS", tx_packets),
            ("IFLA_VF_STATS_RX_BYTES", rx_bytes),
            ("IFLA_VF_STATS_TX_BYTES", tx_bytes),
            ("IFLA_VF_STATS_BROADCAST", 0),
            ("IFLA_VF_STATS_MULTICAST", 0),
        ]}))
    return ("IFLA_VF_INFO", {"attrs": attrs})


def newlink(ifname, vfs, seq=1, index=4):
    """Bytes of an RTM_NEWLINK for ``ifname`` with ``vfs`` (a list of :func:`vf_info`)."""
    msg = ifinfmsg_mod.ifinfmsg()
    msg["header"]["type"] = RTM_NEWLINK
    msg["header"]["sequence_number"] = seq
    msg["index"] = index
    attrs = [("IFLA_IFNAME", ifname), ("IFLA_MTU", 2044)]
    if vfs is not None:
        attrs += [("IFLA_NUM_VF", len(vfs)), ("IFLA_VFINFO_LIST", {"attrs": list(vfs)})]
    msg["attrs"] = attrs
    msg.encode()
    return bytes(msg.data)


def no_such_device(ifname="ib9", seq=1):
    """Bytes of the NLMSG_ERROR the kernel answers for an unknown ifname.

    ``struct nlmsgerr`` is the negative errno followed by the request it
    answers (the request is pyroute2-encoded by the monitor's own encoder).
    """
    request = vf_netlink.encode_getlink_request(ifname, seq)
    payload = struct.pack("=i", -errno.ENODEV) + request
    return struct.pack("=IHHII", 16 + len(payload), NLMSG_ERROR, 0, seq, 0) + payload


class ScriptedSource:
    """An injectable netlink source answering each call with the next reply."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.asked = []
        self.closed = False

    def __call__(self, ifname):
        self.asked.append(ifname)
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def close(self):
        self.closed = True
