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

"""Cost of one fabric sweep per source.

The agent reads every VM's I/O counters once per interval (100 ms on
QEMU, the paper's 1 ms in the simulator), so a sweep must stay far below
the interval. Measured here:

* ``ib_sysfs``: one ``counters()`` over N ports of a temporary
  kernel-shaped sysfs tree (4 counter files per port; tmpfs reads, so the
  real PMA MAD behind each file is not included: on real hardware each
  legacy counter read is a MAD to the HCA firmware, tens of microseconds);
* ``vf_netlink``: decoding a pyroute2-encoded PF reply with N VFs, and a
  real ``RTM_GETLINK`` round trip to this machine's kernel on ``lo``;
* ``libvirt_iface``: one sweep over N VMs on libvirt's ``test:///`` driver
  (per-domain ``interfaceStats`` fallback, in-process driver).

Figures only; nothing is asserted.
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time

from resex_libvirt.fabric import ib_sysfs
from resex_libvirt.fabric import libvirt_iface
from resex_libvirt.fabric import vf_netlink
from resex_libvirt.hypervisor import base as hv_base
from tests.unit.fabric import netlink_replies
from tests.unit.fabric import sysfs_tree


def timed(fn, repeat):
    costs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        costs.append(time.perf_counter() - t0)
    costs.sort()
    return statistics.median(costs) * 1e6, costs[int(0.95 * (len(costs) - 1))] * 1e6


def report(label, median_us, p95_us):
    print("%-44s median %9.1f us   p95 %9.1f us" % (label, median_us, p95_us), flush=True)


def bench_ib_sysfs(ports, repeat):
    tree = sysfs_tree.SysfsTree()
    try:
        owners = {}
        vms = {}
        for i in range(ports):
            dev = "mlx5_%d" % i
            tree.add_ib_device(dev, "0000:%02x:00.0" % (0x10 + i))
            owners["%s:1" % dev] = "vm-%d" % i
            vms["vm-%d" % i] = hv_base.VMInfo(uuid="vm-%d" % i, name="vm-%d" % i)
        monitor = ib_sysfs.IBPortCounters(sysfs_root=tree.root, port_map=owners)
        report("ib_sysfs counters(), %d ports" % ports,
               *timed(lambda: monitor.counters(vms), repeat))
    finally:
        tree.cleanup()


def bench_vf_decode(vfs, repeat):
    data = netlink_replies.newlink(
        "ib0", [netlink_replies.vf_info(i, 10**12 + i, 10**9, 10**11, 10**8)
                for i in range(vfs)])
    report("vf_netlink decode, %d VFs (%d bytes)" % (vfs, len(data)),
           *timed(lambda: vf_netlink.parse_vf_stats(data), repeat))


def bench_vf_kernel(repeat):
    source = vf_netlink.RtnetlinkSource()
    try:
        report("vf_netlink RTM_GETLINK lo, real kernel",
               *timed(lambda: vf_netlink.parse_vf_stats(source("lo")), repeat))
    finally:
        source.close()


NODE_DOMAIN = """
  <domain type='test'>
    <name>vm%(i)d</name><uuid>00000000-0000-0000-0000-%(i)012d</uuid>
    <memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os>
    <devices><interface type='ethernet'><target dev='tap-vm%(i)d'/></interface></devices>
  </domain>"""


def bench_libvirt(n_vms, repeat):
    import libvirt

    tmp = tempfile.mkdtemp(prefix="resex-bench-")
    try:
        node = os.path.join(tmp, "node.xml")
        with open(node, "w") as handle:
            handle.write("<node>%s</node>" % "".join(NODE_DOMAIN % {"i": i}
                                                     for i in range(n_vms)))
        conn = libvirt.open("test://" + node)
        try:
            vms = {}
            for i in range(n_vms):
                uuid = "00000000-0000-0000-0000-%012d" % i
                vms[uuid] = hv_base.VMInfo(uuid=uuid, name="vm%d" % i,
                                           interfaces=("tap-vm%d" % i,))
            monitor = libvirt_iface.LibvirtInterfaceStats(conn)
            report("libvirt_iface counters(), %d VMs (test:///)" % n_vms,
                   *timed(lambda: monitor.counters(vms), repeat))
        finally:
            conn.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args(argv)
    for ports in (2, 8, 32):
        bench_ib_sysfs(ports, args.repeat)
    for vfs in (8, 64, 127):
        bench_vf_decode(vfs, args.repeat)
    bench_vf_kernel(args.repeat)
    for n in (8, 64):
        bench_libvirt(n, args.repeat)
    return 0


if __name__ == "__main__":
    main()
