"""The discrete-event engine: VMs with BenchEx servers, caps and one link.

Time is an integer number of nanoseconds from the start of the run. The
engine jumps from one event to the next: a transfer completing on the link
(:mod:`~resex_libvirt.sim.link`), a compute finishing, a capped VM using up
its budget or a new scheduling period starting
(:mod:`~resex_libvirt.sim.credit`), a request arriving
(:mod:`~resex_libvirt.sim.benchex`), a VM starting or stopping, or the time
the caller asked to advance to. Between events every rate is constant, so
the state advances exactly; the run is deterministic for a seed (each VM
draws from its own ``random.Random(f"{seed}:{name}")``, never the global
RNG, so adding a VM does not change the others' draws).

CPU accounting follows the paper's Fig. 2: a VM's CPU time counts its
compute *and* its busy polling while its transfer is in flight (an RDMA
server spins on its completion queue), so an uncapped busy server shows
about 100% CPU; a server with an empty queue is idle. Transmitted bytes are
counted as the link carries them.
"""

import math
import random

from resex_libvirt.sim import benchex
from resex_libvirt.sim import credit
from resex_libvirt.sim import link as link_mod
from resex_libvirt.sim import model as model_mod


class SimVM:
    """One VM of the testbed: its server, its cap and its counters."""

    def __init__(self, name, workload, start_ns, stop_ns, seed, model):
        self.name = name
        self.workload = workload
        self.start_ns = int(start_ns)
        self.stop_ns = None if stop_ns is None else int(stop_ns)
        self.server = benchex.Server(workload, random.Random("%s:%s" % (seed, name)),
                                     model.compute_cv, model.max_queue)
        self.sched = credit.CapScheduler(model.sched_period_ns)
        self.weight = 256
        self.cpu_ns = 0
        self.tx_bytes = 0.0
        self.state = "pending"   # pending -> active -> stopped

    @property
    def active(self):
        return self.state == "active"

    def running(self):
        """True when the VM has CPU work and budget to do it now."""
        return self.server.wants_cpu and self.sched.budget_ns() > 0


class Testbed:
    """A host of VMs sharing one link; advance it with :meth:`run_until`."""

    def __init__(self, link_bytes_per_s, seed=0, model=None):
        self.model = model or model_mod.CALIBRATED
        self.link = link_mod.Link(link_bytes_per_s)
        self.seed = seed
        self.now_ns = 0
        self.vms = {}
        self._period = 0
        #: Counts the VMs starting and stopping (a cache of the running set follows it).
        self.changes = 0

    def add_vm(self, name, workload, start_ns=0, stop_ns=None):
        if name in self.vms:
            raise ValueError("duplicate VM %r" % name)
        if stop_ns is not None and stop_ns <= start_ns:
            raise ValueError("VM %r stops before it starts" % name)
        vm = SimVM(name, workload, max(start_ns, self.now_ns), stop_ns, self.seed, self.model)
        self.vms[name] = vm
        return vm

    def set_cap(self, name, cap_pct):
        """Cap ``name`` at ``cap_pct`` percent of its pCPU (``None``: uncapped)."""
        self.vms[name].sched.set_cap(cap_pct)

    # -- the engine -----------------------------------------------------------
    def run_until(self, until_ns):
        """Advance the testbed to ``until_ns`` (a no-op for a past time)."""
        until_ns = int(until_ns)
        while True:
            self._settle()
            if self.now_ns >= until_ns:
                return
            t = min(until_ns, self._next_event_ns())
            self._advance(t - self.now_ns)

    def _next_event_ns(self):
        now = self.now_ns
        period = self.model.sched_period_ns
        t = (now // period + 1) * period
        nxt = self.link.next_completion_ns()
        if nxt is not None:
            t = min(t, now + nxt)
        for vm in self.vms.values():
            if vm.state == "pending":
                t = min(t, vm.start_ns)
                continue
            if vm.state != "active":
                continue
            if vm.stop_ns is not None:
                t = min(t, vm.stop_ns)
            arrival = vm.server.next_arrival_ns()
            if arrival is not None:
                t = min(t, arrival)
            if vm.server.wants_cpu:
                budget = vm.sched.budget_ns()
                if budget <= 0:
                    continue
                if vm.server.state == benchex.COMPUTE:
                    t = min(t, now + vm.server.compute_left)
                if budget != credit.INFINITE:
                    t = min(t, now + max(1, math.ceil(budget)))
        return max(t, now + 1)

    def _advance(self, dt):
        done = self.link.advance(dt)
        for vm in self.vms.values():
            if vm.active and vm.running():
                vm.cpu_ns += dt
                vm.sched.consume(dt)
                vm.server.run(dt)
        self.now_ns += dt
        for transfer in done:
            vm = transfer.owner
            if vm.active and vm.server.transfer is transfer:
                vm.server.transfer_done(self.now_ns)

    def _settle(self):
        """Apply every transition due at ``now_ns`` (they take no time)."""
        now = self.now_ns
        period = now // self.model.sched_period_ns
        if period != self._period:
            self._period = period
            for vm in self.vms.values():
                vm.sched.new_period()
        for vm in self.vms.values():
            if vm.state == "pending" and vm.start_ns <= now:
                vm.state = "active"
                vm.server.start(now)
                self.changes += 1
            if vm.state == "active" and vm.stop_ns is not None and vm.stop_ns <= now:
                vm.state = "stopped"
                self.link.drop_owner(vm)
                self.changes += 1
        changed = True
        while changed:
            changed = False
            for vm in self.vms.values():
                if not vm.active:
                    continue
                srv = vm.server
                srv.admit_due(now)
                if srv.begin_next():
                    changed = True
                if srv.state == benchex.COMPUTE and srv.compute_left <= 0:
                    changed |= srv.post_due(now, self.link, vm, link_mod.Transfer)
