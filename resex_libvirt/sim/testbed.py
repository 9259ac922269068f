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
(:mod:`~resex_libvirt.sim.credit`), a request arriving
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
from resex_libvirt.sim import credit
from resex_libvirt.sim import link as link_mod
from resex_libvirt.sim import model as model_mod
from resex_libvirt.sim import workload as workload_mod

IDLE, COMPUTE, POLL = workload_mod.IDLE, workload_mod.COMPUTE, workload_mod.POLL


class SimVM:
    """One VM of the testbed: its server, its cap and its counters."""

    def __init__(self, name, workload, start_ns, stop_ns, seed, model):
        self.name = name
        self.workload = workload
        self.start_ns = int(start_ns)
        self.stop_ns = None if stop_ns is None else int(stop_ns)
        self.server = workload_mod.Server(workload, random.Random("%s:%s" % (seed, name)),
                                          model.compute_cv, model.max_queue)
        self.sched = credit.CapScheduler(model.sched_period_ns)
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
        self._schedule(vm, self.now_ns)

    # -- the engine -----------------------------------------------------------
    def run_until(self, until_ns):
        """Advance the testbed to ``until_ns`` (a no-op for a past time).

        One pass of the loop is one event: settle the VMs due now (in the
        order they were added), find the next event (a period boundary,
        ``until_ns``, the link's first completion or the heap's first live
        event) and advance the link to it. This is the simulator's hot loop:
        it keeps its state in locals and does inline what
        :meth:`_sync`, :meth:`_schedule`, the link's ``next_completion_ns``
        and ``advance`` (below ``VECTOR_FROM`` transfers) and the server's
        ``begin_next``, ``post_due`` and ``transfer_done`` do, calling out
        only for the rarer steps (a VM starting or stopping, arrivals, a
        compute time's draw, the link's step on arrays). The same operations
        in the same order: runs are the same to the last bit.
        """
        until_ns = int(until_ns)
        link = self.link
        heap = self._heap
        due = self._due
        period = self.model.sched_period_ns
        advance = link.advance
        post = link.post
        heappop = heapq.heappop
        heappush = heapq.heappush
        ceil = math.ceil
        bytes_per_ns = link.bytes_per_ns
        Transfer = link_mod.Transfer
        INFINITE = credit.INFINITE
        vector_from = link_mod.VECTOR_FROM
        epsilon = link_mod.EPSILON_BYTES
        now = self.now_ns
        while True:
            if now // period != self._period:
                self._new_period(now)
            if due:
                for order in (sorted(due) if len(due) > 1 else due):
                    vm = due[order]
                    # Testbed._sync, inline.
                    srv = vm.server
                    dt = now - vm.synced_ns
                    if dt > 0:
                        if vm.on_cpu:
                            vm.cpu_ns += dt
                            vm.sched.used_ns += dt
                            if srv.state == COMPUTE:
                                srv.compute_left -= dt
                        elif vm.parked:
                            vm.delay_ns += dt
                    vm.synced_ns = now
                    state = vm.state
                    if state == "pending" and vm.start_ns <= now:
                        state = vm.state = "active"
                        srv.start(now)
                        self.changes += 1
                    if state == "active" and vm.stop_ns is not None and vm.stop_ns <= now:
                        state = vm.state = "stopped"
                        link.drop_owner(vm)
                        self.changes += 1
                    # Testbed._schedule, inline: the VM's next event.
                    t = None
                    vm.on_cpu = vm.parked = False
                    if state == "active":
                        while True:
                            # Server.admit_due, called only when an arrival is due.
                            clients = srv._clients
                            arrival = srv._next_arrival
                            if ((clients and clients[0][0] <= now)
                                    or (arrival is not None and arrival <= now)):
                                srv.admit_due(now)
                            changed = False
                            if srv.state == IDLE and srv.queue:
                                # Server.begin_next, inline.
                                srv.current = srv.queue.popleft()
                                srv.compute_left = srv._compute_ns()
                                srv.state = COMPUTE
                                changed = True
                            if srv.state == COMPUTE and srv.compute_left <= 0:
                                # Server.post_due, inline.
                                srv.transfer = transfer = Transfer(
                                    vm, srv.workload.buffer_bytes, now, srv.current)
                                post(transfer)
                                srv.state = POLL
                                changed = True
                            if not changed:
                                break
                        t = vm.stop_ns
                        arrival = srv._next_arrival
                        clients = srv._clients
                        if clients:
                            c = clients[0][0]
                            if arrival is None or c < arrival:
                                arrival = c
                        if arrival is not None and (t is None or arrival < t):
                            t = arrival
                        if srv.state != IDLE:
                            sched = vm.sched
                            cap = sched.cap_pct
                            if cap is None:
                                budget = INFINITE
                            else:
                                budget = max(0.0, cap / 100.0 * sched.period_ns - sched.used_ns)
                            if budget > 0:
                                vm.on_cpu = True
                                if srv.state == COMPUTE:
                                    done = now + srv.compute_left
                                    if t is None or done < t:
                                        t = done
                                if cap is not None:
                                    parked = now + max(1, ceil(budget))
                                    if t is None or parked < t:
                                        t = parked
                            else:
                                vm.parked = True
                    elif state == "pending":
                        t = vm.start_ns
                    if t != vm.next_ns:
                        vm.next_ns = t
                        if t is not None:
                            self._pushes += 1
                            heappush(heap, (t, self._pushes, vm))
                due.clear()
            if now >= until_ns:
                break
            t = (now // period + 1) * period
            if until_ns < t:
                t = until_ns
            active = link.active
            if active:
                # Link.next_completion_ns, inline.
                if link._rem is not None:
                    rem = link._rem.min().item()
                else:
                    rem = active[0].remaining
                    for tr in active:
                        if tr.remaining < rem:
                            rem = tr.remaining
                nxt = ceil(rem * len(active) / bytes_per_ns)
                if nxt < 1:
                    nxt = 1
                if now + nxt < t:
                    t = now + nxt
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
            # The advance to ``t``: the link, then the events it reaches.
            if not active:
                done = ()
            elif link._rem is None and len(active) < vector_from:
                # Link.advance on a few transfers, inline (same steps).
                dt = t - now
                link.busy_ns += dt
                each = bytes_per_ns * dt / len(active)
                done = []
                for tr in active:
                    rem = tr.remaining
                    sent = each if each < rem else rem
                    tr.remaining = rem = rem - sent
                    tr.owner.tx_bytes += sent
                    if rem <= epsilon:
                        tr.owner.tx_bytes += rem
                        tr.remaining = 0.0
                        done.append(tr)
                if done:
                    link.active = [tr for tr in active if tr.remaining > 0.0]
            else:
                done = advance(t - now)
            self.now_ns = now = t
            for transfer in done:
                vm = transfer.owner
                srv = vm.server
                if vm.state == "active" and srv.transfer is transfer:
                    dt = now - vm.synced_ns
                    if dt > 0:
                        if vm.on_cpu:
                            vm.cpu_ns += dt
                            vm.sched.used_ns += dt
                            if srv.state == COMPUTE:
                                srv.compute_left -= dt
                        elif vm.parked:
                            vm.delay_ns += dt
                    vm.synced_ns = now
                    # Server.transfer_done, inline.
                    req = srv.current
                    srv.latencies.append((now, now - req.arrival_ns))
                    srv.completed += 1
                    srv.current = None
                    srv.transfer = None
                    srv.state = IDLE
                    if req.client is not None:
                        heappush(srv._clients, (now + srv._think_ns(), req.client))
                    due[vm.order] = vm
            while heap and heap[0][0] <= now:
                when, _n, vm = heappop(heap)
                if vm.next_ns == when:
                    due[vm.order] = vm
        for vm in self.vms.values():
            self._sync(vm, now)
        link.flush()

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

    def _schedule(self, vm, now):
        """Find ``vm``'s next event after ``now`` (its state settled at ``now``)."""
        t = None
        vm.on_cpu = vm.parked = False
        state = vm.state
        if state == "active":
            t = vm.stop_ns
            srv = vm.server
            # Server.next_arrival_ns, inline.
            arrival = srv._next_arrival
            clients = srv._clients
            if clients:
                c = clients[0][0]
                if arrival is None or c < arrival:
                    arrival = c
            if arrival is not None and (t is None or arrival < t):
                t = arrival
            if srv.state != workload_mod.IDLE:
                sched = vm.sched
                cap = sched.cap_pct
                # CapScheduler.budget_ns, inline.
                if cap is None:
                    budget = credit.INFINITE
                else:
                    budget = max(0.0, cap / 100.0 * sched.period_ns - sched.used_ns)
                if budget > 0:
                    vm.on_cpu = True
                    if srv.state == workload_mod.COMPUTE:
                        done = now + srv.compute_left
                        if t is None or done < t:
                            t = done
                    if cap is not None:
                        parked = now + max(1, math.ceil(budget))
                        if t is None or parked < t:
                            t = parked
                else:
                    vm.parked = True
        elif state == "pending":
            t = vm.start_ns
        if t != vm.next_ns:
            vm.next_ns = t
            if t is not None:
                self._pushes += 1
                heapq.heappush(self._heap, (t, self._pushes, vm))
