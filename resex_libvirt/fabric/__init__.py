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

"""RDMA/InfiniBand and network usage monitors: bytes and MTUs per VM.

One monitor per source, built from plain arguments by :func:`build` (the
agent reads ``[fabric]`` and calls it: ``agent/fabric.py``):

* ``ib_sysfs`` -> :class:`~resex_libvirt.fabric.ib_sysfs.IBPortCounters`
* ``vf_netlink`` -> :class:`~resex_libvirt.fabric.vf_netlink.VFNetlinkMonitor`
* ``libvirt_iface`` -> :class:`~resex_libvirt.fabric.libvirt_iface.LibvirtInterfaceStats`
* ``none`` -> no monitor (``None``): the market charges CPU only
* ``simulated`` -> the simulated host supplies its own monitor (``resex_libvirt.sim``)
"""

from resex_libvirt import exceptions

SOURCES = ("simulated", "ib_sysfs", "vf_netlink", "libvirt_iface", "none")


def parse_port_owners(items):
    """``["mlx5_0:1=vm-a", "mlx5_1=uuid"]`` -> ``{"mlx5_0:1": "vm-a", "mlx5_1": "uuid"}``."""
    owners = {}
    for item in items or ():
        key, sep, owner = str(item).partition("=")
        if not sep or not key.strip() or not owner.strip():
            raise exceptions.ConfigError(
                "bad port owner entry %r: expected device[:port]=vm" % (item,))
        owners[key.strip()] = owner.strip()
    return owners


def build(source, **kwargs):
    """The monitor for ``source`` (one of :data:`SOURCES`), built with ``kwargs``.

    ``ib_sysfs``: ``sysfs_root``, ``port_map``, ``link_port``, ``overrides``.
    ``vf_netlink``: ``pf`` (required), ``sysfs_root``, ``source``, ``overrides``.
    ``libvirt_iface``: ``connection`` (required), ``netdev``, ``sysfs_root``,
    ``overrides``. Returns ``None`` for ``none``.
    """
    if source == "none":
        return None
    if source == "ib_sysfs":
        from resex_libvirt.fabric import ib_sysfs
        return ib_sysfs.IBPortCounters(**kwargs)
    if source == "vf_netlink":
        from resex_libvirt.fabric import vf_netlink
        return vf_netlink.VFNetlinkMonitor(**kwargs)
    if source == "libvirt_iface":
        from resex_libvirt.fabric import libvirt_iface
        return libvirt_iface.LibvirtInterfaceStats(**kwargs)
    if source == "simulated":
        raise exceptions.ConfigError(
            "the simulated fabric is built by the simulated host (resex_libvirt.sim), "
            "not by resex_libvirt.fabric.build")
    raise exceptions.ConfigError("unknown fabric source %r (choose from %s)"
                                 % (source, ", ".join(SOURCES)))
