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

"""The discrete-event engine: VMs with BenchEx servers, caps and one link.

Time is an integer number of nanoseconds from the start of the run. The
engine jumps from one event to the next: a transfer completing on the link
(:mod:`~resex_libvirt.sim.link`), a compute finishing, a capped VM using up
its budget or a new scheduling period starting
(:mod:`~resex_libvirt.sim.credit_scheduler`), a request arriving
(:mod:`~resex_libvirt.sim.workload`), a VM starting or stopping, or the time
the caller asked to advance to. Between events every rate is constant, so
the state advances exactly; the run is deterministic for a seed (each VM
draws from its own ``random.Random(f"{seed}:{name}")``, never the global
RNG, so adding a VM does not change the others' draws).

The engine keeps each VM's next event in a heap, so an event costs the work
of the VMs it concerns (and of the transfers on the link), not a scan of
every VM: a VM's CPU time, budget and compute progress are brought up to
date lazily (:meth:`Testbed._sync`), when one of its own events comes, when
its cap changes, at a scheduling-period boundary, and for every VM when
:meth:`Testbed.run_until` returns, so its counters are exact whenever the
caller reads them. The link still advances at every event (processor
sharing: the share of each transfer changes with their number), with the
same steps as a scan of every VM would take, so the figures are the same to
the last bit.

CPU accounting follows the paper's Fig. 2: a VM's CPU time counts its
compute *and* its busy polling while its transfer is in flight (an RDMA
server spins on its completion queue), so an uncapped busy server shows
about 100% CPU; a server with an empty queue is idle. Transmitted bytes are
counted as the link carries them. A VM that has work (computing or polling)
while its cap has parked it accumulates *run delay* (``delay_ns``): the time
a Linux host counts in the vCPU thread's schedstat run delay when a CFS
quota throttles it, and libvirt reports as ``vcpu.<n>.delay``.

With ``pcpus`` fewer than the running VMs, the VMs contend for the pCPUs:
at each period's start every VM's share of a pCPU is worked out by weight
(:mod:`~resex_libvirt.sim.cpu_share`) and bounds its budget as a cap does,
so a VM with work beyond its share waits, and that wait is run delay too.
By default (``pcpus=None``) every VM has a pCPU of its own, as in the
paper, and shares never apply.
"""

import heapq
import math
import random

from resex_libvirt.sim import cpu_share
from resex_libvirt.sim import credit_scheduler
from resex_libvirt.sim import link as link_mod
from resex_libvirt.sim import model as model_mod
from resex_libvirt.sim import workload as workload_mod

IDLE, COMPUTE, POLL = workload_mod.IDLE, workload_mod.COMPUTE, workload_mod.POLL
INFINITE = credit_scheduler.INFINITE


class SimVM:
    """One VM of the testbed: its server, its cap and its counters."""

    def __init__(self, name, workload, start_ns, stop_ns, seed, model):
        self.name = name
        self.workload = workload
        self.start_ns = int(start_ns)
        self.stop_ns = None if stop_ns is None else int(stop_ns)
        self.server = workload_mod.Server(workload, random.Random("%s:%s" % (seed, name)),
                                          model.compute_cv, model.max_queue)
        self.sched = credit_scheduler.CapScheduler(model.sched_period_ns)
        self.weight = 256
        self.cpu_ns = 0
        self.tx_bytes = 0.0
        self.state = "pending"   # pending -> active -> stopped
        self.order = 0           # position among the testbed's VMs
        self.synced_ns = 0       # CPU time is accounted up to here
        self.on_cpu = False      # running since synced_ns (until its next event)
        self.parked = False      # has work but no budget since synced_ns (run delay)
        self.delay_ns = 0        # cumulative run delay: runnable, not running
        self.runnable_ns = 0     # cpu_ns + delay_ns at the last period's start
        self.next_ns = None      # its next event (the heap may hold stale ones)

    @property
    def active(self):
        return self.state == "active"

    def running(self):
        """True when the VM has CPU work and budget to do it now."""
        return self.server.wants_cpu and self.sched.budget_ns() > 0


class Testbed:
    """A host of VMs sharing one link; advance it with :meth:`run_until`."""

    def __init__(self, link_bytes_per_s, seed=0, model=None, pcpus=None):
        if pcpus is not None and pcpus < 1:
            raise ValueError("pcpus must be >= 1 (None: one per VM)")
        self.model = model or model_mod.CALIBRATED
        self.pcpus = pcpus
        self.link = link_mod.Link(link_bytes_per_s)
        self.seed = seed
        self.now_ns = 0
        self.vms = {}
        self._period = 0
        #: Counts the VMs starting and stopping (a cache of the running set follows it).
        self.changes = 0
        self._heap = []          # (time, push count, vm): each VM's next event
        self._pushes = 0
        self._due = {}           # order -> vm: VMs to settle at now_ns

    def add_vm(self, name, workload, start_ns=0, stop_ns=None):
        if name in self.vms:
            raise ValueError("duplicate VM %r" % name)
        if stop_ns is not None and stop_ns <= start_ns:
            raise ValueError("VM %r stops before it starts" % name)
        vm = SimVM(name, workload, max(start_ns, self.now_ns), stop_ns, self.seed, self.model)
        vm.order = len(self.vms)
        vm.synced_ns = self.now_ns
        self.vms[name] = vm
        self._due[vm.order] = vm
        return vm

    def set_cap(self, name, cap_pct):
        """Cap ``name`` at ``cap_pct`` percent of its pCPU (``None``: uncapped)."""
        vm = self.vms[name]
        self._sync(vm, self.now_ns)
        vm.sched.set_cap(cap_pct)
        self._settle((vm,), self.now_ns)

    # -- the engine -----------------------------------------------------------
    def run_until(self, until_ns):
        """Advance the testbed to ``until_ns`` (a no-op for a past time)."""
        self.run_through((until_ns,))

    def run_through(self, stops_ns):
        """Advance the testbed to each of ``stops_ns`` in turn (a no-op for a past one).

        The same run as one :meth:`run_until` per stop (each stop is an
        event: the link's steps depend on it), in one pass of the loop, for
        a caller that reads nothing between the stops: the VMs' counters
        are brought up to date at the last one only (their CPU accounting
        is in integer nanoseconds, so that changes no figure).

        One pass of the loop is one event: settle the VMs due now, in the
        order they were added (:meth:`_settle`), find the next event (a
        period boundary, the stop, the link's first completion or the
        heap's first live event), advance the link to it and note the VMs
        whose transfer completed (:meth:`_transfers_done`) or whose own
        event came. This is the simulator's hot loop: it keeps its state in
        locals and calls out once per step of an event, never once per VM.
        """
        stops = iter(stops_ns)
        until_ns = next(stops, None)
        if until_ns is None:
            return
        until_ns = int(until_ns)
        link = self.link
        heap = self._heap
        due = self._due
        period = self.model.sched_period_ns
        heappop = heapq.heappop
        settle = self._settle
        now = self.now_ns
        # The next period's start (time only grows: crossing it is the test).
        boundary = (self._period + 1) * period
        while True:
            if now >= boundary:
                self._new_period(now)
                boundary = (self._period + 1) * period
            if due:
                settle([due[o] for o in sorted(due)] if len(due) > 1 else due.values(), now)
                due.clear()
            if now >= until_ns:
                for until_ns in stops:     # the next stop ahead, if any
                    until_ns = int(until_ns)
                    if until_ns > now:
                        break
                else:
                    break
            t = boundary if boundary < until_ns else until_ns
            while heap:
                top = heap[0]
                when = top[0]
                if top[2].next_ns != when:
                    heappop(heap)            # stale: the VM's event moved
                    continue
                if when < t:
                    t = when
                break
            if t < now + 1:
                t = now + 1
            # The link's first completion, if earlier, is the event (it is at least now + 1).
            now, done = link.step(now, t)
            if done:
                self._transfers_done(done, now)
            while heap and heap[0][0] <= now:
                when, _n, vm = heappop(heap)
                if vm.next_ns == when:
                    due[vm.order] = vm
        self.now_ns = now
        for vm in self.vms.values():
            dt = now - vm.synced_ns
            if dt > 0:                     # Testbed._sync, inline
                if vm.on_cpu:
                    vm.cpu_ns += dt
                    vm.sched.used_ns += dt
                    srv = vm.server
                    if srv.state == COMPUTE:         # Server.run, inline
                        srv.compute_left -= dt
                elif vm.parked:
                    vm.delay_ns += dt
                vm.synced_ns = now
        link.flush()

    def _transfers_done(self, done, now):
        """The link completed ``done`` at ``now``: free their servers, make their VMs due."""
        due = self._due
        for transfer in done:
            vm = transfer.owner
            srv = vm.server
            if vm.state == "active" and srv.transfer is transfer:
                dt = now - vm.synced_ns
                if dt > 0:                 # Testbed._sync, inline
                    if vm.on_cpu:
                        vm.cpu_ns += dt
                        vm.sched.used_ns += dt
                        if srv.state == COMPUTE:     # Server.run, inline
                            srv.compute_left -= dt
                    elif vm.parked:
                        vm.delay_ns += dt
                vm.synced_ns = now
                srv.transfer_done(now)
                due[vm.order] = vm

    def _settle(self, vms, now):
        """Bring each of ``vms`` to ``now``: start or stop it, step its server, schedule it.

        A VM's next event (the heap keeps it) is the first of its stop, its
        server's next arrival, the end of its compute and the end of its
        budget; a VM with work and no budget is parked (run delay).
        """
        link = self.link
        heap = self._heap
        for vm in vms:
            srv = vm.server
            dt = now - vm.synced_ns
            if dt > 0:                     # Testbed._sync, inline
                if vm.on_cpu:
                    vm.cpu_ns += dt
                    vm.sched.used_ns += dt
                    if srv.state == COMPUTE:         # Server.run, inline
                        srv.compute_left -= dt
                elif vm.parked:
                    vm.delay_ns += dt
            vm.synced_ns = now
            state = vm.state
            stop = vm.stop_ns
            if state != "active":
                if state == "pending" and vm.start_ns <= now:
                    state = vm.state = "active"
                    srv.start(now)
                    self.changes += 1
            if stop is not None and state == "active" and stop <= now:
                state = vm.state = "stopped"
                link.drop_owner(vm)
                self.changes += 1
            on_cpu = parked = False
            if state == "active":
                t = srv.step(now, link, vm)          # the next arrival
                if stop is not None and (t is None or stop < t):
                    t = stop
                work = srv.state
                if work != IDLE:
                    sched = vm.sched
                    # CapScheduler.budget_ns, inline (infinite when uncapped).
                    budget = sched.quota - sched.used_ns
                    if budget > 0:
                        on_cpu = True
                        if work == COMPUTE:
                            done = now + srv.compute_left
                            if t is None or done < t:
                                t = done
                        if budget != INFINITE:
                            spent = now + max(1, math.ceil(budget))   # budget runs out
                            if t is None or spent < t:
                                t = spent
                    else:
                        parked = True
            elif state == "pending":
                t = vm.start_ns
            else:
                t = None
            vm.on_cpu = on_cpu
            vm.parked = parked
            if t != vm.next_ns:
                vm.next_ns = t
                if t is not None:
                    self._pushes += 1
                    heapq.heappush(heap, (t, self._pushes, vm))

    def _new_period(self, now):
        """A scheduling period starts at ``now``: every VM's budget is renewed, every VM is due."""
        self._period = now // self.model.sched_period_ns
        due = self._due
        for vm in self.vms.values():
            self._sync(vm, now)
            vm.sched.new_period()
            due[vm.order] = vm
        if self.pcpus is not None:
            self._share_pcpus()

    def _share_pcpus(self):
        """Each running VM's share of the pCPUs for the period starting now (cpu_share)."""
        period = self.model.sched_period_ns
        running = [vm for vm in self.vms.values() if vm.state == "active"]
        demands = []
        for vm in running:
            runnable = vm.cpu_ns + vm.delay_ns
            demands.append(100.0 * min(period, runnable - vm.runnable_ns) / period)
            vm.runnable_ns = runnable
        shares = cpu_share.entitlements(demands, [vm.weight for vm in running],
                                        [vm.sched.knob_pct for vm in running], self.pcpus)
        for vm, share in zip(running, shares):
            if share != vm.sched.share_pct:
                vm.sched.set_share(share)

    def _sync(self, vm, now):
        """Account the CPU ``vm`` used since it was last brought up to date."""
        dt = now - vm.synced_ns
        if dt > 0:
            if vm.on_cpu:
                vm.cpu_ns += dt
                vm.sched.used_ns += dt
                vm.server.run(dt)
            elif vm.parked:
                vm.delay_ns += dt
        vm.synced_ns = now
