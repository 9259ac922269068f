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

"""Where traffic is counted (an IB port, a VF, a tap) and which VM owns it.

Every monitor first reads its endpoints, then sums them per VM for
:meth:`FabricMonitor.counters`; ``resex-fabric show`` prints the endpoints
themselves, owned or not, so an operator sees what the agent would charge
and what it cannot see.
"""

import dataclasses

from resex_libvirt.fabric import base

#: Endpoint states: counted normally, stuck 32-bit counter, no readable counters.
OK = "ok"
SATURATED = "saturated"
UNREADABLE = "unreadable"


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One counted endpoint.

    ``name`` identifies it (``mlx5_0:1``, ``ib0/vf3``, ``tap-vm1``),
    ``detail`` says more (PCI address, rate), ``vm`` is the owning VM's
    uuid or ``None``, ``counters`` the cumulative :class:`IOCounters`
    (``None`` when unreadable), ``state`` one of :data:`OK`,
    :data:`SATURATED` (a lower bound) or :data:`UNREADABLE`.
    """

    name: str
    vm: str | None
    counters: base.IOCounters | None
    state: str = OK
    detail: str = ""


def sum_by_vm(endpoints):
    """``{uuid: IOCounters}`` summed over the readable endpoints each VM owns."""
    totals = {}
    for ep in endpoints:
        if ep.vm is None or ep.counters is None:
            continue
        prev = totals.get(ep.vm)
        c = ep.counters
        if prev is None:
            totals[ep.vm] = c
        else:
            totals[ep.vm] = base.IOCounters(
                tx_bytes=prev.tx_bytes + c.tx_bytes,
                tx_packets=prev.tx_packets + c.tx_packets,
                rx_bytes=prev.rx_bytes + c.rx_bytes,
                rx_packets=prev.rx_packets + c.rx_packets)
    return totals


def vm_lookup(vms):
    """``{uuid or name: uuid}`` of ``vms`` (``{uuid: VMInfo}``), for configured maps."""
    index = {}
    for uuid, info in vms.items():
        index[uuid] = uuid
        if info.name:
            index.setdefault(info.name, uuid)
    return index
