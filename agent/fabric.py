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

"""The fabric monitor the ``[fabric]`` options describe (``agent/conf/fabric.py``).

The library builds monitors from plain arguments (:func:`resex_libvirt.fabric.build`);
this is where the agent's configuration becomes those arguments.
"""

import logging

from resex_libvirt import exceptions
from resex_libvirt import fabric
from resex_libvirt.fabric import link_facts

LOG = logging.getLogger(__name__)


def build(conf, connection=None, source=None, bulk_stats=None):
    """The monitor configured in ``conf.fabric``, or ``None`` for ``none``.

    ``connection`` (a ``virConnect`` or a callable returning one) is needed
    for ``libvirt_iface`` (and ``bulk_stats``, the hypervisor's per-sweep
    stats, saves it a call); ``source`` overrides ``conf.fabric.source``.
    """
    group = conf.fabric
    source = source or group.source
    overrides = link_facts.LinkOverrides(capacity_gbps=group.link_capacity_gbps,
                                         mtu=group.link_mtu)
    if source == "ib_sysfs":
        try:
            owners = fabric.parse_port_owners(group.port_owners)
        except exceptions.ConfigError as exc:
            raise exceptions.ConfigError("[fabric] port_owners: %s" % exc) from exc
        return fabric.build(source, sysfs_root=group.sysfs_root, port_map=owners,
                            link_port=group.link_port, overrides=overrides)
    if source == "vf_netlink":
        return fabric.build(source, pf=group.pf_netdev, sysfs_root=group.sysfs_root,
                            overrides=overrides)
    if source == "libvirt_iface":
        if connection is None:
            raise exceptions.ConfigError("libvirt_iface needs a libvirt connection")
        return fabric.build(source, connection=connection, netdev=group.uplink_netdev,
                            sysfs_root=group.sysfs_root, overrides=overrides,
                            bulk_stats=bulk_stats)
    return fabric.build(source)


def without_unknown_link(monitor, source):
    """``(monitor, None)``, or ``(None, why)`` when its link's capacity is unknown.

    The market's I/O supply is the link's capacity (paper Section VI-A): a
    guessed capacity would price I/O and report a link utilisation that the
    Nova scheduler believes, so a link that is neither configured nor
    discoverable turns the fabric term off instead. The agent then runs as
    with ``[fabric] source = none``: the market charges CPU only and the host
    report shows no link utilisation. Said once, at WARNING, here at start.
    """
    if monitor is None:
        return None, None
    try:
        monitor.link()
        return monitor, None
    except exceptions.FabricError as exc:
        why = str(exc)
    # Logged outside the except block: oslo.log would append the exception.
    LOG.warning("fabric term off: %s. The agent runs without it (as [fabric] source = "
                "none: the market charges CPU only, reports show no link utilisation); %s",
                why, _advice(source, why))
    try:
        monitor.close()
    except Exception:
        LOG.debug("error while closing %r", monitor, exc_info=True)
    return None, why


def _advice(source, why):
    """How to turn the fabric term on, for what went wrong."""
    if source == "ib_sysfs" and "no InfiniBand port" in why:
        return ("this host has no InfiniBand port: for RoCE or Ethernet set [fabric] "
                "source = libvirt_iface (each VM's tap counters) with uplink_netdev or "
                "link_capacity_gbps")
    return "set [fabric] link_capacity_gbps or uplink_netdev for %s to turn it on" % source
