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

"""Plain records that flow through the market.

They carry no behaviour beyond validation of their own fields, so that the
simulator, the libvirt adapter, the fabric monitors and the latency intake
can all produce them without importing each other.
"""

import dataclasses
import math
import typing

from resex_libvirt import sla as sla_mod


class Sample(typing.NamedTuple):
    """What one VM used during one control interval.

    ``cpu_pct`` is percent of one pCPU over the interval (may exceed 100 for
    a VM with several vCPUs). ``tx_mtus`` is the number of link MTUs the VM
    sent (paper Section V-A: "we track the number of MTUs sent"). ``ts`` is
    the monotonic time at the end of the interval, in seconds; the market
    itself never reads it. A named tuple: one is made per VM per interval.
    """

    vm: str
    ts: float
    cpu_pct: float
    tx_bytes: int = 0
    tx_mtus: int = 0
    rx_bytes: int = 0
    rx_mtus: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class LatencyWindow:
    """Summary of a VM's recent request latencies, in microseconds."""

    count: int
    mean_us: float
    std_us: float
    p99_us: float

    def __post_init__(self):
        for name in ("mean_us", "std_us", "p99_us"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError("%s must be finite and >= 0, got %r" % (name, value))
        if self.count < 0:
            raise ValueError("count must be >= 0")


@dataclasses.dataclass(frozen=True, slots=True)
class VMSpec:
    """A VM as the market sees it: its size and its validated SLA."""

    vm: str
    vcpus: int = 1
    sla: sla_mod.SLA = dataclasses.field(default_factory=sla_mod.SLA)

    @property
    def limit_pct(self):
        return self.sla.effective_limit(self.vcpus)

    @property
    def reservation_pct(self):
        return self.sla.effective_reservation(self.vcpus)


class Decision(typing.NamedTuple):
    """The market's verdict for one VM for the next interval.

    ``cap_pct`` is percent of one pCPU for the whole VM, always within the
    VM's [reservation, limit]; a cap equal to ``100 x vCPUs`` means
    "uncapped". ``weight`` is the credit-scheduler weight (Xen default 256)
    derived from the VM's shares. ``rate`` is the VM's charging-rate
    multiplier (1.0 = the base price; IOShares raises it).
    """

    cap_pct: float
    weight: int
    rate: float = 1.0
