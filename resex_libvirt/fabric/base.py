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
import enum


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


class Capability(enum.Enum):
    """What a monitor can do beyond the interface (:attr:`FabricMonitor.capabilities`)."""

    #: ``counters_rows(rows)``: ``(tx_bytes, rx_bytes)`` arrays aligned with the market's rows.
    COUNTS_BY_ROWS = "counts_by_rows"


class FabricMonitor(abc.ABC):
    """Per-VM I/O counters from one source; ``capabilities``: its :class:`Capability` set."""

    capabilities = frozenset()

    @abc.abstractmethod
    def counters(self, vms):
        """``{uuid: IOCounters}`` for the VMs in ``vms`` (``{uuid: VMInfo}``) it can see."""

    @abc.abstractmethod
    def link(self):
        """The :class:`LinkInfo` of the link the VMs share."""

    def close(self):
        """Release any handle."""
