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

"""A Xen credit-scheduler-like CPU cap for a VM on its own pCPU.

Paper Section III: "During scheduling, the Xen hypervisor allows the VM to
run only for a percentage of its time slice (10ms), depending on the value
of the 'CPU cap'." A VM capped at ``c`` percent may run at most
``c / 100 x period`` in each scheduling period; once it has used that it is
*parked* until the next period starts. While parked it runs no code at all:
it cannot compute, cannot poll a completion queue and cannot post a new
work request -- which is why a CPU cap throttles VMM-bypass I/O even though
the hypervisor never sees that I/O (Section I). Transfers already posted
keep going on the HCA.

Schanzenbach and Casanova (*Accuracy and Responsiveness of CPU Sharing Using
Xen's Cap Values*, Sections 3 and 4) measured Xen's caps to be accurate
(compute rate linear in the cap, R^2 0.9997, mean absolute error 0.71%) and
in force within one probe of a change; the model enforces them exactly and
at once: a new cap applies to what is left of the current period.

A cap of ``None`` (or >= 100: one vCPU cannot use more than its pCPU) is
"uncapped": the VM runs whenever it has work, its pCPU being its own (the
paper pins one VM per pCPU, so weights never matter and are not modelled).
Periods are aligned to multiples of ``period_ns`` from time zero.

Where the VMs share fewer pCPUs than they have vCPUs
(:mod:`~resex_libvirt.sim.cpu_share`), the host also sets each VM's
*share* of a pCPU for the period; the budget is then that of the lower of
the cap and the share (``cap_pct``, what the engine reads), while
``knob_pct`` stays the cap written through the knob.
"""

INFINITE = float("inf")


class CapScheduler:
    """The CPU budget of one single-vCPU VM under a credit-scheduler cap."""

    __slots__ = ("period_ns", "cap_pct", "knob_pct", "share_pct", "used_ns", "quota")

    def __init__(self, period_ns, cap_pct=None):
        if period_ns < 1:
            raise ValueError("period_ns must be >= 1")
        self.period_ns = int(period_ns)
        self.cap_pct = self.knob_pct = self.share_pct = None
        self.used_ns = 0
        self.set_cap(cap_pct)

    def set_cap(self, cap_pct):
        """``None`` or >= 100 means uncapped; the cap must be > 0 otherwise."""
        if cap_pct is not None:
            cap_pct = float(cap_pct)
            if not cap_pct > 0:
                raise ValueError("cap_pct must be > 0 (None means uncapped)")
            if cap_pct >= 100.0:
                cap_pct = None
        self.knob_pct = cap_pct
        self._combine()

    def set_share(self, share_pct):
        """The VM's share of a pCPU this period (``None``: a whole pCPU; > 0 otherwise)."""
        if share_pct is not None:
            share_pct = float(share_pct)
            if not share_pct > 0:
                raise ValueError("share_pct must be > 0 (None means a whole pCPU)")
        self.share_pct = share_pct
        self._combine()

    def _combine(self):
        knob, share = self.knob_pct, self.share_pct
        cap = self.cap_pct = knob if share is None else (share if knob is None
                                                         else min(knob, share))
        #: :meth:`quota_ns`, worked out when the cap or the share changes (the engine reads it).
        self.quota = INFINITE if cap is None else cap / 100.0 * self.period_ns

    @property
    def capped(self):
        return self.cap_pct is not None

    def quota_ns(self):
        """CPU time allowed per period (``inf`` when uncapped)."""
        return self.quota

    def budget_ns(self):
        """CPU time the VM may still run in the current period."""
        if self.cap_pct is None:
            return INFINITE
        return max(0.0, self.quota - self.used_ns)

    def consume(self, ns):
        self.used_ns += ns

    def new_period(self):
        self.used_ns = 0
