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

"""Scheduler knobs per libvirt driver: the market's cap and weight as schedinfo.

The market speaks Xen's credit-scheduler convention (doc/source/architecture.rst, "Knobs"):
a *cap* in percent of ONE physical CPU for the whole VM (a 2-vCPU VM may use
up to 200) and a *weight* on Xen's scale (default 256). Each mapping here turns
that into the raw scheduler parameters of one libvirt driver, reads them back,
and writes them with the flags that driver accepts. The mapping is chosen from
``virDomainGetSchedulerType()`` when a VM is adopted (:func:`discover`), never
assumed from the URI.

Xen ``credit``/``credit2`` (libxl)
    ``cap`` (uint): percent of one pCPU for the whole domain, ``0`` = no cap,
    at most ``100 x vCPUs``; ``weight`` (uint) 1..65535, default 256. libxl
    accepts only flags 0 and changes are live only, so parameters are written
    with ``virDomainSetSchedulerParameters`` (no flags). A requested cap is
    rounded to a whole percent and never below 1: a cap of 0 would *remove*
    the cap, the opposite of what a market asking for ~0 means.

QEMU ``posix`` (cgroup CPU controller)
    The cap goes to ``global_period``/``global_quota``: libvirt writes them to
    the domain's own cgroup (``cpu.cfs_period_us``/``cpu.cfs_quota_us`` on
    cgroup v1, ``cpu.max`` on v2), which holds every vCPU thread, so the quota
    bounds the VM as a whole exactly as Xen's cap does (one busy vCPU of a
    2-vCPU VM may take the whole cap). ``vcpu_quota`` would be per vCPU and
    would split the cap evenly, which Xen does not do. ``quota = period x
    cap / 100``; the kernel and libvirt refuse quotas below 1000 us, so for
    caps under 1% of the default 100 ms period the period is lengthened (up
    to libvirt's 1 s maximum), which keeps every cap >= 0.1% exact. ``-1``
    means no cap; ``0`` is never written (libvirt silently ignores it). The
    weight goes to ``cpu_shares`` on the scale of the cgroup version in use,
    Xen's default weight 256 meaning the cgroup default: on cgroup v1
    ``cpu.shares`` (2..262144, default 1024, ``shares = 4 x weight``); on
    cgroup v2 libvirt writes ``cpu_shares`` unchanged into ``cpu.weight``
    (1..10000, default 100, ``shares = weight x 100 / 256``). Shares are never
    written below the VM's *floor*, what Nova set from the flavor's
    ``quota:cpu_shares``. Parameters are written with
    ``VIR_DOMAIN_AFFECT_LIVE`` only: the market's caps are transient and must
    not outlive the agent in the persistent XML.

Original values (:meth:`KnobMapping.originals`)
    What a VM's knobs are without the agent, for the journal: from the
    persistent definition (``<cputune>`` of the inactive XML, which the agent
    never writes) and Nova's flavor (``quota:cpu_*``), never from live
    values, which may be a cap another agent set (a live-migrated VM
    arrives with the source host's cap). Nova never writes a global cap, so
    one in a Nova instance's persistent definition (copied there from a
    capped live domain) is refused as an original (no cap instead), whatever
    its period; in another VM's definition it is the operator's, kept.

Anything else (the test driver's ``fair``, LXC, ...)
    Monitor-only: the VM is sampled and reported, never actuated.
"""

import abc

import libvirt

from resex_libvirt.hypervisor import base

#: Xen credit scheduler: weight bounds and default (xl sched-credit(1)).
XEN_WEIGHT_MIN = 1
XEN_WEIGHT_MAX = 65535
XEN_WEIGHT_DEFAULT = 256

#: cgroup v1 cpu.shares bounds accepted by libvirt's ``cpu_shares``.
CGROUP_SHARES_MIN = 2
CGROUP_SHARES_MAX = 262144
#: cgroup v1 default shares (1024) / Xen default weight (256).
SHARES_PER_WEIGHT = 4

#: ``cpu_shares`` range and default per cgroup version: v1 ``cpu.shares``,
#: v2 ``cpu.weight`` (libvirt writes ``cpu_shares`` into it unchanged).
SHARES_RANGE = {1: (CGROUP_SHARES_MIN, CGROUP_SHARES_MAX), 2: (1, 10000)}
SHARES_DEFAULT = {1: 1024, 2: 100}
CGROUP_VERSIONS = (1, 2)

#: CFS bandwidth bounds enforced by libvirt for ``*_period``/``*_quota`` (us).
CFS_PERIOD_DEFAULT_US = 100000
CFS_PERIOD_MAX_US = 1000000
CFS_QUOTA_MIN_US = 1000

#: The smallest cap a QEMU VM can be given exactly: 1000 us of a 1 s period.
QEMU_MIN_CAP_PCT = 100.0 * CFS_QUOTA_MIN_US / CFS_PERIOD_MAX_US


def _clamp(value, low, high):
    return max(low, min(high, value))


class KnobMapping(abc.ABC):
    """Raw scheduler parameters of one driver for the market's cap and weight."""

    #: ``base.Knobs`` this mapping offers.
    knobs = base.MONITOR_ONLY
    #: The raw parameter names :meth:`read` keeps and :meth:`apply` writes.
    names = ()
    #: The raw parameter names that carry the weight.
    weight_names = ()
    #: The raw parameter names :meth:`apply` may write back from the journal.
    restorable = ()
    #: Parameters written together: one held by an operator holds its group.
    groups = ()

    @abc.abstractmethod
    def originals(self, persistent, flavor, nova=False):
        """The VM's knobs without the agent, for the journal.

        ``persistent``: ``{parameter: int}`` of the inactive definition's
        ``<cputune>``; ``flavor``: ``{parameter: int}`` of Nova's
        ``quota:cpu_*`` extra specs; ``nova``: the VM is a Nova instance.
        Returns ``(params, refused)`` where ``refused`` names what was not
        taken as an original, or ``None``.
        """

    def without(self, params, held):
        """``params`` without the groups of which a parameter is in ``held``."""
        if not held:
            return params
        drop = set()
        for group in self.groups:
            if held.intersection(group):
                drop.update(group)
        return {k: v for k, v in params.items() if k not in drop}

    @abc.abstractmethod
    def params_for(self, cap_pct, weight, vcpus):
        """Raw parameters for a cap (``None`` = none) and weight (``None`` = keep)."""

    @abc.abstractmethod
    def cap_of(self, params, vcpus):
        """The cap in percent of one pCPU that ``params`` express (``None`` = none)."""

    @abc.abstractmethod
    def weight_of(self, params):
        """The weight on Xen's scale that ``params`` express."""

    def read(self, all_params):
        """The subset of ``schedulerParameters()`` this mapping controls."""
        return {name: all_params[name] for name in self.names if name in all_params}

    @abc.abstractmethod
    def apply(self, dom, params):
        """Write ``params`` to the libvirt domain ``dom``."""


class XenCreditMapping(KnobMapping):
    """Xen credit/credit2 ``cap``/``weight`` through libxl (see module docstring)."""

    names = ("cap", "weight")
    weight_names = ("weight",)
    restorable = names
    groups = (("cap",), ("weight",))

    def __init__(self, sched_type="credit"):
        self.knobs = base.Knobs(driver="xen-%s" % sched_type, cap=True, weight=True)

    def originals(self, persistent, flavor, nova=False):
        # libxl keeps caps live only; a domain starts uncapped with the
        # weight of its <cputune><shares>, or libxl's default.
        weight = persistent.get("cpu_shares", XEN_WEIGHT_DEFAULT)
        return {"cap": 0, "weight": int(_clamp(weight, XEN_WEIGHT_MIN, XEN_WEIGHT_MAX))}, None

    def params_for(self, cap_pct, weight, vcpus):
        params = {}
        if cap_pct is None:
            params["cap"] = 0
        else:
            params["cap"] = int(_clamp(round(cap_pct), 1, 100 * max(1, int(vcpus))))
        if weight is not None:
            params["weight"] = int(_clamp(round(weight), XEN_WEIGHT_MIN, XEN_WEIGHT_MAX))
        return params

    def cap_of(self, params, vcpus):
        cap = params.get("cap", 0)
        return None if not cap else float(cap)

    def weight_of(self, params):
        return int(params.get("weight", XEN_WEIGHT_DEFAULT))

    def apply(self, dom, params):
        # libxl rejects every flag (measured on libvirt 9); the flag-less call is flags 0.
        dom.setSchedulerParameters(dict(params))


class QemuPosixMapping(KnobMapping):
    """QEMU cgroup ``global_period``/``global_quota`` and ``cpu_shares``.

    ``period_us`` is the CFS period a cap is written with (the kernel's
    100 ms unless given; the agent passes ``[libvirt] qemu_cap_period_us``,
    10 ms by default). A capped VM runs ``cap`` of every period, so the
    period is the length of its bursts: Xen's credit scheduler, the paper's
    setting, slices every 10 ms (Section III), and a VMM-bypass sender posts
    a whole burst of I/O in its slot. A shorter period means shorter bursts
    at the cost of more scheduler work; caps whose quota would fall under
    1000 us still lengthen the period.
    """

    knobs = base.Knobs(driver="qemu-posix", cap=True, weight=True)
    names = ("global_period", "global_quota", "cpu_shares")
    weight_names = ("cpu_shares",)
    # The VM-wide cap first: cgroup v1 refuses a vCPU quota above its parent's.
    restorable = ("global_period", "global_quota", "cpu_shares", "vcpu_period", "vcpu_quota")
    groups = (("global_period", "global_quota"), ("cpu_shares",))

    def __init__(self, period_us=None, cgroup_version=1, shares_floor=None):
        period = CFS_PERIOD_DEFAULT_US if period_us is None else int(period_us)
        if not CFS_QUOTA_MIN_US <= period <= CFS_PERIOD_MAX_US:
            raise ValueError("period_us must be within %d..%d, not %r"
                             % (CFS_QUOTA_MIN_US, CFS_PERIOD_MAX_US, period_us))
        if cgroup_version not in CGROUP_VERSIONS:
            raise ValueError("cgroup_version must be 1 or 2, not %r" % (cgroup_version,))
        self.period_us = period
        self.cgroup_version = cgroup_version
        low, high = SHARES_RANGE[cgroup_version]
        self.shares_default = SHARES_DEFAULT[cgroup_version]
        self.shares_per_weight = self.shares_default / XEN_WEIGHT_DEFAULT
        #: The shares the agent never goes below: the range's floor or Nova's value.
        self.shares_min = low if shares_floor is None else int(_clamp(shares_floor, low, high))
        self.shares_max = high

    def originals(self, persistent, flavor, nova=False):
        out = {"global_period": CFS_PERIOD_DEFAULT_US, "global_quota": -1,
               "cpu_shares": self.shares_default}
        refused = None
        quota = persistent.get("global_quota", -1)
        period = persistent.get("global_period", CFS_PERIOD_DEFAULT_US)
        if quota > 0 and nova:
            # Nova writes <shares>, <period> and <quota> (per vCPU) from the
            # flavor, never a global cap: one in a Nova instance's definition
            # was copied from a live domain an agent capped (a migration).
            refused = ("global_quota %d (period %d us): Nova never sets a global cap"
                       % (quota, period))
        elif quota > 0:
            out["global_period"], out["global_quota"] = period, quota
        elif "global_period" in persistent:
            out["global_period"] = period
        for name in ("cpu_shares", "vcpu_period", "vcpu_quota"):
            value = flavor.get(name, persistent.get(name))
            if value is not None:
                out[name] = value
        low, high = SHARES_RANGE[self.cgroup_version]
        out["cpu_shares"] = int(_clamp(out["cpu_shares"], low, high))
        return out, refused

    def params_for(self, cap_pct, weight, vcpus):
        params = {}
        if cap_pct is None:
            params["global_period"] = CFS_PERIOD_DEFAULT_US
            params["global_quota"] = -1
        else:
            cap = _clamp(float(cap_pct), QEMU_MIN_CAP_PCT, 100.0 * max(1, int(vcpus)))
            period = self.period_us
            quota = int(round(period * cap / 100.0))
            if quota < CFS_QUOTA_MIN_US:
                period = min(CFS_PERIOD_MAX_US,
                             int(round(CFS_QUOTA_MIN_US * 100.0 / cap)))
                quota = max(CFS_QUOTA_MIN_US, int(round(period * cap / 100.0)))
            params["global_period"] = period
            params["global_quota"] = quota
        if weight is not None:
            params["cpu_shares"] = int(_clamp(round(weight * self.shares_per_weight),
                                              self.shares_min, self.shares_max))
        return params

    def cap_of(self, params, vcpus):
        quota = int(params.get("global_quota", -1))
        period = int(params.get("global_period", CFS_PERIOD_DEFAULT_US)) or CFS_PERIOD_DEFAULT_US
        # 0 and negative quotas both mean "no limit" to libvirt.
        if quota <= 0:
            return None
        return 100.0 * quota / period

    def weight_of(self, params):
        return int(params.get("cpu_shares", self.shares_default)) / self.shares_per_weight

    def apply(self, dom, params):
        params = dict(params)
        if params.get("global_quota") == 0:
            raise ValueError("a global_quota of 0 is ignored by libvirt; use -1 for none")
        dom.setSchedulerParametersFlags(params, libvirt.VIR_DOMAIN_AFFECT_LIVE)


def discover(sched_type, params, qemu_period_us=None, cgroup_version=1, shares_floor=None):
    """The :class:`KnobMapping` for a VM, or ``None`` for monitor-only.

    ``sched_type`` is the first element of ``virDomain.schedulerType()`` and
    ``params`` the VM's ``schedulerParameters()``: a mapping is chosen only
    when the driver reports the scheduler and offers the parameters it needs.
    ``qemu_period_us`` is the CFS period of QEMU caps, ``cgroup_version`` the
    host's cgroup version (1 or 2) and ``shares_floor`` the shares Nova set
    for the VM (:class:`QemuPosixMapping`).
    """
    if sched_type in ("credit", "credit2") and "cap" in params and "weight" in params:
        return XenCreditMapping(sched_type)
    if sched_type == "posix" and "global_quota" in params and "global_period" in params:
        return QemuPosixMapping(qemu_period_us, cgroup_version, shares_floor)
    return None
