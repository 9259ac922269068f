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

"""The narrow interface every hypervisor adapter implements.

The agent loop talks to the simulated host and to libvirt through this one
interface; both return plain records and raise only the project's
exceptions (:mod:`resex_libvirt.exceptions`). What a driver can do beyond
the interface it declares as data (:class:`Capability`), never probed.
"""

import abc
import dataclasses
import enum
import typing

from resex_libvirt import sla as sla_mod


@dataclasses.dataclass(frozen=True)
class Knobs:
    """Which scheduler controls a VM's driver offers.

    ``driver`` names the mapping: ``xen-credit``, ``xen-credit2``,
    ``qemu-posix``, ``simulated`` or ``none`` (monitor-only).
    """

    driver: str
    cap: bool
    weight: bool

    @property
    def actuated(self):
        return self.cap or self.weight


MONITOR_ONLY = Knobs(driver="none", cap=False, weight=False)


class VcpuTimes(typing.NamedTuple):
    """A VM's cumulative vCPU times, summed over its vCPUs (ns).

    ``delay_ns``: time its vCPU threads sat runnable in the host's run queue
    (libvirt's ``vcpu.<n>.delay``, the kernel's schedstat run delay: the
    guest's steal time); ``run_ns``: time they ran (``vcpu.<n>.time``);
    ``vcpus``: how many vCPUs were read. Host-side evidence no guest can
    forge (:mod:`resex_libvirt.board.evidence`).
    """

    delay_ns: int
    run_ns: int
    vcpus: int = 1


@dataclasses.dataclass(frozen=True)
class VMInfo:
    """A running VM as an adapter discovered it.

    ``uuid`` is the identity everywhere (for OpenStack it is the instance
    UUID). ``sla_source`` says where the SLA came from (``metadata``,
    ``nova``, ``default``, ``scenario``). ``latency_channel`` is the host
    path of the VM's virtio-serial latency socket, if its domain has one.
    ``interfaces`` are the VM's tap device names and ``hostdevs`` the PCI
    addresses of devices passed through to it (for the fabric monitors).
    ``latency_problem`` says why a VM that should report latency cannot
    (e.g. no virtio-serial controller for the channel), ``None`` otherwise.
    ``nova_name`` is the instance's name in Nova (``<nova:name>``), if any;
    ``project`` the ID of the Keystone project that owns it (``<nova:owner>``)
    and ``project_name`` that project's name, if Nova wrote them; ``flavor``
    the name of its Nova flavor (``<nova:flavor name=...>``). The project
    labels the VM's metrics and board entry for operators; it is never told
    to another tenant (:mod:`resex_agent.status`). ``addresses`` are the VM's IPs and
    MACs (:func:`~resex_libvirt.fabric.domain_xml.vm_addresses`), which the
    agent publishes on the board (the operators' and the scheduler's, never
    a tenant's). ``ensemble`` is the group the VM's latency is judged with
    (``resex:ensemble`` or its Nova server group,
    :meth:`~resex_libvirt.hypervisor.sla_layers.SLAResolver.ensemble`), or None.
    """

    uuid: str
    name: str
    vcpus: int = 1
    sla: sla_mod.SLA = dataclasses.field(default_factory=sla_mod.SLA)
    knobs: Knobs = MONITOR_ONLY
    sla_source: str = "default"
    latency_channel: str | None = None
    interfaces: tuple = ()
    hostdevs: tuple = ()
    latency_problem: str | None = None
    nova_name: str | None = None
    project: str | None = None
    project_name: str | None = None
    addresses: tuple = ()
    flavor: str | None = None
    ensemble: str | None = None

    @property
    def label(self):
        """How log lines name the VM: Nova's name and UUID first, when Nova gave them."""
        if self.nova_name:
            return "%s (%s, %s)" % (self.nova_name, self.uuid, self.name)
        return self.name


class Capability(enum.Enum):
    """What a hypervisor can do beyond the interface, declared in :attr:`Hypervisor.capabilities`.

    As nova's ``ComputeDriver.capabilities`` and tooz's ``CHARACTERISTICS``:
    a driver lists what it does, and the controller reads the list once,
    when it is built (:class:`resex_libvirt.control.Controller`). A method a
    capability brings is called only on a driver that declares it.
    """

    #: Writes the VMs' knobs (``set_knobs``). Without it every VM is
    #: monitored and reported, never actuated.
    ACTUATES = "actuates"
    #: ``vcpu_times()`` gives each VM's vCPU run delay (the host report's evidence).
    RUN_DELAY = "run_delay"
    #: ``generation`` grows whenever ``vms()`` returns something different.
    GENERATION = "generation"
    #: ``original_updates()`` reports changes of the VMs' original knobs (the journal).
    REPORTS_ORIGINALS = "reports_originals"
    #: ``cpu_times_rows(rows)``: CPU times aligned with the market's rows.
    CPU_BY_ROWS = "cpu_by_rows"
    #: ``delay_times_rows(rows)``: run delays aligned with the market's rows.
    DELAY_BY_ROWS = "delay_by_rows"


class Hypervisor(abc.ABC):
    """Discovery, CPU time and knobs of the VMs on one host.

    ``capabilities`` is the frozenset of :class:`Capability` the driver
    declares: none unless it says so.
    """

    capabilities = frozenset()

    @abc.abstractmethod
    def vms(self):
        """``{uuid: VMInfo}`` of the running VMs now."""

    @abc.abstractmethod
    def cpu_times(self):
        """``{uuid: cumulative CPU time in ns}`` of the running VMs, in one sweep."""

    @abc.abstractmethod
    def set_knobs(self, uuid, cap_pct, weight):
        """Apply a cap and a credit-scheduler weight to a VM.

        The cap is in percent of one pCPU for the whole VM (``None`` =
        uncapped), the weight on Xen's scale (256 default). Raises
        ``VMGone`` if the VM vanished and ``KnobUnsupported`` for a
        monitor-only VM.
        """

    @abc.abstractmethod
    def get_knobs(self, uuid):
        """The VM's current raw scheduler parameters (a JSON-able dict), for the journal."""

    def original_knobs(self, uuid):
        """The VM's knobs without the agent, for the journal (default: the live ones)."""
        return self.get_knobs(uuid)

    @abc.abstractmethod
    def restore_knobs(self, uuid, params):
        """Write back raw parameters previously read with :meth:`get_knobs`."""

    def caps_in_force(self):
        """``{uuid: cap percent or None}`` as last written to the hypervisor, no call made.

        What the driver's parameters express, which may differ from the
        market's decision (a QEMU cap under 1 % of a period is written with
        a longer period; an operator may hold the knob). Default: ``{}``.
        """
        return {}

    def adopt_operator_values(self, values):
        """Knob values operators set live before this start (from the journal).

        ``{uuid: {"dom_id": int, "values": {param: value}}}``: they are the
        VMs' originals, and the agent leaves those knobs alone, as long as
        the domain was not restarted since (same ``dom_id``). Default: no
        operator changes to follow.
        """

    def pcpus(self):
        """Physical CPUs the VMs share."""
        return 1

    def vcpu_times(self):
        """``{uuid: VcpuTimes}`` of the last CPU-time sweep (:attr:`Capability.RUN_DELAY`)."""
        return {}

    def close(self):
        """Release the connection."""
