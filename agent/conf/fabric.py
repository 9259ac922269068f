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

"""Options of the ``[fabric]`` group: where the agent reads each VM's I/O.

The fabric monitor supplies the bytes and MTUs each VM sent (paper
Section V-A, "MTUsSent") and the link's capacity and MTU (Section VI-B2).
See :mod:`resex_libvirt.fabric` and ``doc/source/fabric.rst``.
"""

from oslo_config import cfg

GROUP = cfg.OptGroup(
    "fabric",
    title="Fabric (RDMA/InfiniBand and network) usage monitor",
    help="Where the agent reads how many bytes and MTUs each VM sends.")

SOURCES = [
    ("simulated", "The simulated InfiniBand link of resex-sim (no hardware)."),
    ("ib_sysfs", "Per-port counters in /sys/class/infiniband/<dev>/ports/<n>/counters; "
                 "for hosts where each VM owns an HCA or a port."),
    ("vf_netlink", "Per-VF statistics the SR-IOV physical function reports over rtnetlink "
                   "(IFLA_VF_STATS); for VMs with SR-IOV virtual functions."),
    ("libvirt_iface", "libvirt's interface statistics of each VM's tap devices; for "
                      "virtio/tap tenants (Ethernet, RoCE without SR-IOV)."),
    ("none", "No I/O monitoring: the market charges CPU only."),
]

fabric_opts = [
    cfg.StrOpt(
        "source",
        default="none",
        choices=SOURCES,
        help="""
Which source of per-VM I/O counters the agent uses.

Possible values:

* ``simulated``, ``ib_sysfs``, ``vf_netlink``, ``libvirt_iface``, ``none``
  (see the choice descriptions)

Related options:

* ``sysfs_root``, ``port_owners``, ``link_port`` (``ib_sysfs``)
* ``pf_netdev`` (``vf_netlink``), ``uplink_netdev`` (``libvirt_iface``)
* ``link_capacity_gbps``, ``link_mtu`` (all sources)
"""),
    cfg.StrOpt(
        "sysfs_root",
        default="/sys",
        help="""
Root of the sysfs tree the monitors read (``class/infiniband``,
``class/net``). Only tests and containers with a relocated sysfs change it.

Possible values:

* An absolute directory path
"""),
    cfg.ListOpt(
        "port_owners",
        default=[],
        help="""
Which VM owns which InfiniBand device or port, for ``source = ib_sysfs``.
Ports not listed are matched by PCI address: a device whose PCI function is
passed through to a VM (its ``<hostdev>`` source address) belongs to it.

Possible values:

* A list of ``<device>[:<port>]=<vm uuid or name>``, e.g.
  ``mlx5_0:1=vm-a,mlx5_1=4f1c0c7e-...``

Related options:

* ``source``
"""),
    cfg.StrOpt(
        "link_port",
        help="""
The InfiniBand port whose link the VMs share, for ``source = ib_sysfs``.
Unset: the first ACTIVE port owned by a VM, else the first port.

Possible values:

* ``<device>:<port>``, e.g. ``mlx5_0:1``

Related options:

* ``link_capacity_gbps``, ``link_mtu``
"""),
    cfg.StrOpt(
        "pf_netdev",
        help="""
The SR-IOV physical function's netdev whose VF statistics are read, for
``source = vf_netlink`` (``ib0`` for an InfiniBand PF, the Ethernet PF for
RoCE).

Possible values:

* A network interface name

Related options:

* ``source``
"""),
    cfg.StrOpt(
        "uplink_netdev",
        help="""
The host interface (bridge uplink) the VMs' taps share, for
``source = libvirt_iface``: its ``speed`` and ``mtu`` describe the link
unless overridden.

Possible values:

* A network interface name

Related options:

* ``link_capacity_gbps``, ``link_mtu``
"""),
    cfg.FloatOpt(
        "link_capacity_gbps",
        min=0.001,
        help="""
Data capacity of the shared link in Gb/s, overriding what the monitor
reads (the IB ``rate`` file converted by the lane encoding, or a netdev's
speed). The paper's link was 8 Gb/s of data (Section VI-B2).

Possible values:

* A positive number of Gb/s (decimal, 1 Gb/s = 1e9 bit/s)

Related options:

* ``link_mtu``
"""),
    cfg.IntOpt(
        "link_mtu",
        min=256,
        max=65536,
        help="""
MTU of the shared link in bytes, overriding what the monitor finds. Bytes
sent become MTUs (the market's unit of I/O) by dividing by it. Unset: the IB
MTU behind the IPoIB netdev, the RoCE MTU, the uplink's MTU, else 1024
(paper Section VI-B2).

Possible values:

* 256..65536

Related options:

* ``link_capacity_gbps``
"""),
    cfg.BoolOpt(
        "count_peers",
        default=False,
        help="""
Count each VM's bytes by destination address, where the host sees them (its
taps): the kernel counts them in an nftables table of the agent's,
``netdev resex_peers`` (doc/source/fabric.rst, "Bytes per peer"), read
every 5 s (or every epoch when longer) by a thread of the agent's own. Published as the metric
``resex_vm_peer_transmit_bytes_per_second`` (per VM its 8 busiest
destinations, the rest as ``other``). A VM on an SR-IOV VF or an
InfiniBand HCA has no tap: nothing is counted for it.

Needs ``nft`` (Debian package nftables) and CAP_NET_ADMIN: the shipped
systemd unit keeps only CAP_DAC_OVERRIDE, so add it in a drop-in
(``CapabilityBoundingSet=CAP_DAC_OVERRIDE CAP_NET_ADMIN``). Without them
the agent logs why once and keeps trying; control is not
affected. The table is deleted when the agent stops.
"""),
]


def register_opts(conf):
    # oslo.config keeps overrides on the OptGroup object: a private copy per
    # ConfigOpts keeps two configurations (or two tests) from sharing them.
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title, help=GROUP.help))
    conf.register_opts(fabric_opts, group=GROUP.name)


def list_opts():
    return [(GROUP, fabric_opts)]
