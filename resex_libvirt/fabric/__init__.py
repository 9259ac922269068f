"""RDMA/InfiniBand and network usage monitors: bytes and MTUs per VM.

One monitor per source, chosen by configuration (``[fabric] source``):

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
                "bad [fabric] port_owners entry %r: expected device[:port]=vm" % (item,))
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


def build_from_conf(conf, connection=None, source=None):
    """The monitor configured in ``conf.fabric`` (see ``agent/conf/fabric.py``).

    ``connection`` (a ``virConnect`` or a callable returning one) is needed
    for ``libvirt_iface``; ``source`` overrides ``conf.fabric.source``.
    """
    from resex_libvirt.fabric import link_facts

    group = conf.fabric
    source = source or group.source
    overrides = link_facts.LinkOverrides(capacity_gbps=group.link_capacity_gbps,
                                         mtu=group.link_mtu)
    if source == "ib_sysfs":
        return build(source, sysfs_root=group.sysfs_root,
                     port_map=parse_port_owners(group.port_owners),
                     link_port=group.link_port, overrides=overrides)
    if source == "vf_netlink":
        return build(source, pf=group.pf_netdev, sysfs_root=group.sysfs_root,
                     overrides=overrides)
    if source == "libvirt_iface":
        if connection is None:
            raise exceptions.ConfigError("libvirt_iface needs a libvirt connection")
        return build(source, connection=connection, netdev=group.uplink_netdev,
                     sysfs_root=group.sysfs_root, overrides=overrides)
    return build(source)
