"""The interface of every fabric monitor.

A monitor reads cumulative transmit/receive counters per VM from one source
(IB port counters in sysfs, per-VF statistics over netlink, libvirt's
interface statistics, or the simulated link) and knows the link's capacity
and MTU. Turning counters into per-interval usage is the caller's job
(:class:`resex_libvirt.counters.DeltaTracker`), so every source is handled
alike.
"""

import abc
import dataclasses


@dataclasses.dataclass(frozen=True)
class IOCounters:
    """Cumulative counters of one VM (bytes and packets)."""

    tx_bytes: int
    tx_packets: int = 0
    rx_bytes: int = 0
    rx_packets: int = 0


@dataclasses.dataclass(frozen=True)
class LinkInfo:
    """The shared link: capacity in bytes per second of data and its active MTU."""

    name: str
    capacity_bytes_per_s: float
    mtu: int

    def mtus(self, nbytes):
        """Bytes -> MTUs sent (rounded up: a partial MTU is a packet)."""
        return -(-int(nbytes) // self.mtu) if nbytes > 0 else 0


class FabricMonitor(abc.ABC):
    """Per-VM I/O counters from one source."""

    @abc.abstractmethod
    def counters(self, vms):
        """``{uuid: IOCounters}`` for the VMs in ``vms`` (``{uuid: VMInfo}``) it can see."""

    @abc.abstractmethod
    def link(self):
        """The :class:`LinkInfo` of the link the VMs share."""

    def close(self):
        """Release any handle."""
