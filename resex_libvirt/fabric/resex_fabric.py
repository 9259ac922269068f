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

"""``resex-fabric show``: what each VM sends and receives, as the agent would see it.

Reads the chosen source twice, ``--seconds`` apart, and prints per
endpoint (IB port, VF or tap) its owner VM, tx/rx rates in bytes/s and in
MTUs/s of the link, and the link itself. ``--json`` prints one JSON
document for scripts. A host without an InfiniBand/RDMA device says so and
exits 0; exit status 1 is for real errors (unreadable source, libvirt
down when it is needed), 2 for bad arguments.
"""

import argparse
import json
import sys
import time

from resex_libvirt import counters as counters_mod
from resex_libvirt import exceptions
from resex_libvirt import fabric
from resex_libvirt.fabric import domain_xml
from resex_libvirt.fabric import endpoint as endpoint_mod
from resex_libvirt.fabric import link_facts
from resex_libvirt.hypervisor import base as hv_base

DEFAULT_URI = "qemu:///system"


_EMPTY = {
    "ib_sysfs": "the RDMA devices have no ports",
    "vf_netlink": "the PF reports no VF statistics (SR-IOV off, no VFs, or a driver "
                  "without per-VF stats)",
    "libvirt_iface": "no running VM has a tap interface",
}


class NoHCA(exceptions.FabricError):
    """The host has no InfiniBand/RDMA device: nothing to show (not an error)."""


def _parser():
    parser = argparse.ArgumentParser(
        prog="resex-fabric", description="Per-VM RDMA/InfiniBand and network usage.")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="per VM: device/VF, link, tx/rx rates and MTUs/s")
    show.add_argument("--source", choices=("ib_sysfs", "vf_netlink", "libvirt_iface"),
                      default="ib_sysfs", help="where the counters come from")
    show.add_argument("--seconds", type=float, default=3.0,
                      help="measurement window (default 3)")
    show.add_argument("--json", action="store_true", help="one JSON document on stdout")
    show.add_argument("--sysfs-root", default="/sys", help="sysfs root (default /sys)")
    show.add_argument("--uri", help="libvirt URI for VM discovery (default %s for "
                      "vf_netlink and libvirt_iface; none for ib_sysfs)" % DEFAULT_URI)
    show.add_argument("--pf", help="SR-IOV PF netdev (vf_netlink), e.g. ib0")
    show.add_argument("--uplink", help="uplink netdev of the taps (libvirt_iface)")
    show.add_argument("--owner", action="append", default=[], metavar="DEV[:PORT]=VM",
                      help="port owner (ib_sysfs), repeatable")
    show.add_argument("--link-port", help="the shared IB port, DEV:PORT (ib_sysfs)")
    show.add_argument("--capacity-gbps", type=float, help="override the link's data rate")
    show.add_argument("--mtu", type=int, help="override the link's MTU")
    return parser


def vms_from_libvirt(conn):
    """``{uuid: VMInfo}`` of the running domains, with their taps and hostdevs."""
    import libvirt

    vms = {}
    for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
        try:
            xml = dom.XMLDesc(0)
            vms[dom.UUIDString()] = hv_base.VMInfo(
                uuid=dom.UUIDString(), name=dom.name(),
                interfaces=domain_xml.interface_targets(xml),
                hostdevs=domain_xml.hostdev_addresses(xml))
        except (libvirt.libvirtError, exceptions.ConfigError):
            continue
    return vms


def _open_libvirt(uri):
    try:
        import libvirt
    except ImportError as exc:
        raise exceptions.FabricError("libvirt-python is not installed") from exc
    # Errors are reported once, by us; not also by libvirt's default handler on stderr.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as exc:
        raise exceptions.FabricError("cannot connect to libvirt at %s: %s" % (uri, exc)) from exc


def _monitor_and_vms(args, warn):
    overrides = link_facts.LinkOverrides(capacity_gbps=args.capacity_gbps, mtu=args.mtu)
    conn = None
    vms = {}
    if args.source == "ib_sysfs":
        owners = fabric.parse_port_owners(args.owner)
        monitor = fabric.build("ib_sysfs", sysfs_root=args.sysfs_root, port_map=owners,
                               link_port=args.link_port, overrides=overrides)
        if not monitor.devices():
            raise NoHCA("no InfiniBand/RDMA device on this host (%s is missing or empty)"
                        % monitor.ib_root)
        if args.uri:
            conn = _open_libvirt(args.uri)
            vms = vms_from_libvirt(conn)
        for owner in owners.values():
            if owner not in endpoint_mod.vm_lookup(vms):
                vms[owner] = hv_base.VMInfo(uuid=owner, name=owner)
        return monitor, vms, conn
    if args.source == "vf_netlink":
        if not args.pf:
            raise exceptions.ConfigError("--pf is required with --source vf_netlink")
        monitor = fabric.build("vf_netlink", pf=args.pf, sysfs_root=args.sysfs_root,
                               overrides=overrides)
        if not monitor.pf_exists():
            probe = fabric.build("ib_sysfs", sysfs_root=args.sysfs_root)
            if not probe.devices():
                raise NoHCA("no InfiniBand/RDMA device on this host (%s is missing or "
                            "empty) and no netdev %s" % (probe.ib_root, args.pf))
            raise exceptions.FabricError("PF netdev %s not found" % args.pf)
        try:
            conn = _open_libvirt(args.uri or DEFAULT_URI)
            vms = vms_from_libvirt(conn)
        except exceptions.FabricError as exc:
            warn("VFs shown without owners: %s" % exc)
        return monitor, vms, conn
    conn = _open_libvirt(args.uri or DEFAULT_URI)
    monitor = fabric.build("libvirt_iface", connection=conn, netdev=args.uplink,
                           sysfs_root=args.sysfs_root, overrides=overrides)
    return monitor, vms_from_libvirt(conn), conn


def measure(monitor, vms, seconds, sleep=time.sleep, clock=time.monotonic):
    """Two readings ``seconds`` apart -> rows of per-endpoint rates (never negative)."""
    trackers = {f: counters_mod.DeltaTracker()
                for f in ("tx_bytes", "tx_packets", "rx_bytes", "rx_packets")}
    first = monitor.endpoints(vms)
    t0 = clock()
    for ep in first:
        if ep.counters is not None:
            for field, tracker in trackers.items():
                tracker.update(ep.name, getattr(ep.counters, field))
    sleep(seconds)
    second = monitor.endpoints(vms)
    dt = clock() - t0
    rows = []
    for ep in second:
        row = {"endpoint": ep.name, "detail": ep.detail, "vm": ep.vm,
               "vm_name": vms[ep.vm].name if ep.vm in vms else None,
               "state": ep.state}
        for field, tracker in trackers.items():
            delta = (tracker.update(ep.name, getattr(ep.counters, field))
                     if ep.counters is not None else None)
            row[field + "_per_s"] = (delta / dt if delta is not None and dt > 0
                                     else (0.0 if delta is not None else None))
        rows.append(row)
    return rows


def _link(monitor):
    try:
        link = monitor.link()
    except exceptions.FabricError as exc:
        return None, str(exc)
    return link, None


def _fmt_rate(value, unit):
    if value is None:
        return "-"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return "%.2f %s%s/s" % (value / scale, prefix, unit)
    return "%.0f %s/s" % (value, unit)


def show(args, out=None, err=None, sleep=time.sleep, clock=time.monotonic):
    """Run ``show`` with parsed ``args``; return the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr

    def warn(msg):
        err.write("resex-fabric: %s\n" % msg)

    conn = None
    try:
        monitor, vms, conn = _monitor_and_vms(args, warn)
        link, link_error = _link(monitor)
        rows = measure(monitor, vms, max(args.seconds, 0.0), sleep=sleep, clock=clock)
    except NoHCA as exc:
        if args.json:
            json.dump({"source": args.source, "hca": False, "message": str(exc),
                       "endpoints": []}, out)
            out.write("\n")
        else:
            out.write("%s; nothing to show.\n" % exc)
        return 0
    except exceptions.ConfigError as exc:
        warn(str(exc))
        return 2
    except exceptions.ResexError as exc:
        warn(str(exc))
        return 1
    finally:
        if conn is not None:
            conn.close()
    for row in rows:
        for d in ("tx", "rx"):
            rate = row["%s_bytes_per_s" % d]
            row["%s_mtus_per_s" % d] = (
                link.mtus(rate) if link is not None and rate is not None else None)
    if args.json:
        json.dump({
            "source": args.source, "hca": True, "seconds": args.seconds,
            "link": None if link is None else {
                "name": link.name, "capacity_bytes_per_s": link.capacity_bytes_per_s,
                "mtu": link.mtu},
            "link_error": link_error, "endpoints": rows}, out, indent=2, sort_keys=True)
        out.write("\n")
        return 0
    if link is not None:
        out.write("link %s: %s data, MTU %d bytes\n" % (
            link.name, _fmt_rate(link.capacity_bytes_per_s * 8, "b"), link.mtu))
    else:
        out.write("link: unknown (%s)\n" % link_error)
    out.write("%-16s %-24s %-14s %12s %12s %12s %12s\n" % (
        "ENDPOINT", "VM", "STATE", "TX", "RX", "TX MTU/s", "RX MTU/s"))
    for row in rows:
        vm = row["vm_name"] or row["vm"] or "-"
        out.write("%-16s %-24s %-14s %12s %12s %12s %12s\n" % (
            row["endpoint"], vm[:24], row["state"],
            _fmt_rate(row["tx_bytes_per_s"], "B"), _fmt_rate(row["rx_bytes_per_s"], "B"),
            "-" if row["tx_mtus_per_s"] is None else row["tx_mtus_per_s"],
            "-" if row["rx_mtus_per_s"] is None else row["rx_mtus_per_s"]))
        if row["detail"]:
            out.write("    %s\n" % row["detail"])
    if not rows:
        out.write("(nothing counted: %s)\n" % _EMPTY[args.source])
    if any(r["state"] == endpoint_mod.SATURATED for r in rows):
        out.write("saturated: a 32-bit counter is stuck at its maximum; its rate is a lower "
                  "bound (reset it with perfquery -R, or use a PMA with extended counters)\n")
    return 0


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.seconds < 0:
        _parser().error("--seconds must be >= 0")
    return show(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
