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

"""A BenchEx-like server, one per VM (paper Section IV).

"Our clients send multiple transaction requests to the server ... The
server maintains these requests in a queue and processes them in a first
come first serve basis." Each request costs the server:

1. *compute* on the VM's vCPU (Black-Scholes pricing in BenchEx; CTime in
   Fig. 2), so it only progresses while the VM is not parked by its cap;
2. an RDMA transfer of the VM's buffer size over the shared link, posted
   at the end of the compute (posting needs the CPU too: a parked VM posts
   nothing), during which the server busy-polls its completion queue
   (WTime + PTime in Fig. 2): polling burns CPU while the VM runs, and the
   transfer keeps going on the HCA while the VM is parked.

The *server-side latency* of a request runs from its arrival in the queue
to the completion of its transfer, and is what BenchEx reports to the agent
("continuously report the observed server-side latencies").

Load is either open-loop (``arrival_rate_per_s``; Poisson or evenly spaced
arrivals) or ``clients`` closed-loop clients that each keep one request
outstanding and issue the next one ``think_us`` after the previous reply.
Deviations: the client's request message and the reply's propagation are
not modelled (BenchEx's latency is measured at the server); the ~10 us the
paper's VMs spend reporting (Section VII-B) is not charged.
"""

import collections
import dataclasses
import heapq

from resex_libvirt.sim import link as link_mod

IDLE = "idle"
COMPUTE = "compute"
POLL = "poll"

#: Open-loop arrival processes: exponential gaps, or evenly spaced ones.
ARRIVAL_PROCESSES = ("poisson", "uniform")


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one VM's server does: its buffer, compute and load."""

    buffer_bytes: int
    compute_us: float
    clients: int = 0
    think_us: float = 0.0
    arrival_rate_per_s: float = 0.0
    arrival_process: str = "poisson"

    def __post_init__(self):
        if self.buffer_bytes < 1:
            raise ValueError("buffer_bytes must be >= 1")
        if self.compute_us < 0 or self.think_us < 0 or self.arrival_rate_per_s < 0:
            raise ValueError("compute_us, think_us and arrival_rate_per_s must be >= 0")
        if self.clients < 0:
            raise ValueError("clients must be >= 0")
        if bool(self.clients) == bool(self.arrival_rate_per_s):
            raise ValueError("give exactly one of clients or arrival_rate_per_s")
        if self.arrival_process not in ARRIVAL_PROCESSES:
            raise ValueError("arrival_process must be one of %s" % ", ".join(ARRIVAL_PROCESSES))


class Request:
    __slots__ = ("arrival_ns", "client")

    def __init__(self, arrival_ns, client):
        self.arrival_ns = arrival_ns
        self.client = client


class Server:
    """The request queue and state machine of one VM's server.

    ``workload`` is a :class:`Workload`; ``rng`` a
    :class:`random.Random` of this VM alone; ``compute_cv`` and
    ``max_queue`` come from the frozen model.
    """

    def __init__(self, workload, rng, compute_cv, max_queue):
        self.workload = workload
        self.rng = rng
        self.compute_cv = compute_cv
        self.max_queue = max_queue
        self.queue = collections.deque()
        self.state = IDLE
        self.current = None
        self.compute_left = 0
        self.transfer = None
        self.latencies = []
        self.dropped = 0
        self.completed = 0
        self._next_arrival = None
        self._clients = []
        # The workload is frozen: its constant times are worked out once.
        self._compute_base = workload.compute_us * 1000.0
        self._think = max(0, round(workload.think_us * 1000.0))

    # -- arrivals -----------------------------------------------------------
    def start(self, now_ns):
        """Begin the load at ``now_ns`` (the VM's start time)."""
        w = self.workload
        if w.clients:
            for c in range(w.clients):
                heapq.heappush(self._clients, (now_ns, c))
        elif w.arrival_rate_per_s:
            self._next_arrival = now_ns + self._gap_ns()

    def _gap_ns(self):
        rate = self.workload.arrival_rate_per_s
        if self.workload.arrival_process == "uniform":
            return max(1, round(1e9 / rate))
        return max(1, round(self.rng.expovariate(rate) * 1e9))

    def admit_due(self, now_ns):
        """Queue every arrival due at or before ``now_ns``; True if any."""
        admitted = False
        clients = self._clients
        queue = self.queue
        while clients and clients[0][0] <= now_ns:
            t, c = heapq.heappop(clients)
            if len(queue) < self.max_queue:          # _enqueue, inline
                queue.append(Request(t, c))
            else:
                self._enqueue(t, c)
            admitted = True
        while self._next_arrival is not None and self._next_arrival <= now_ns:
            self._enqueue(self._next_arrival, None)
            self._next_arrival += self._gap_ns()
            admitted = True
        return admitted

    def _enqueue(self, arrival_ns, client):
        if len(self.queue) >= self.max_queue:
            self.dropped += 1
            if client is not None:
                # A closed-loop client whose request is refused tries again later.
                heapq.heappush(self._clients, (arrival_ns + self._think + 1, client))
            return
        self.queue.append(Request(arrival_ns, client))

    # -- service -------------------------------------------------------------
    @property
    def wants_cpu(self):
        return self.state != IDLE

    def step(self, now_ns, link, owner):
        """Admit, start and post what is due at ``now_ns``; return the next arrival time.

        A request starts its compute when the server is idle, and its
        transfer of ``buffer_bytes`` (owned by ``owner``) goes on ``link``
        when the compute is done; both take no time, so one call goes as far
        as ``now_ns`` allows: every arrival due is admitted first (none can
        become due at the same instant afterwards), then an idle server
        starts the next request, then a finished compute posts its transfer.
        The next arrival (open loop or a client's) is ``None`` when none is
        coming. The engine calls this at every event of the VM.
        """
        clients = self._clients
        arrival = self._next_arrival
        if (clients and clients[0][0] <= now_ns) or (arrival is not None
                                                     and arrival <= now_ns):
            self.admit_due(now_ns)
            arrival = self._next_arrival
        state = self.state
        if state == IDLE and self.queue:
            self.current = self.queue.popleft()
            # Its compute: normal around the workload's, truncated at 3 sigma.
            base = self._compute_base
            if self.compute_cv > 0:
                z = self.rng.gauss(0.0, 1.0)
                z = -3.0 if z < -3.0 else 3.0 if z > 3.0 else z
                base *= 1.0 + self.compute_cv * z
            ns = round(base)
            self.compute_left = ns if ns > 0 else 0
            state = self.state = COMPUTE
        if state == COMPUTE and self.compute_left <= 0:
            self.transfer = link_mod.Transfer(owner, self.workload.buffer_bytes, now_ns,
                                              self.current)
            link.post(self.transfer)
            self.state = POLL
        if clients:
            c = clients[0][0]
            if arrival is None or c < arrival:
                arrival = c
        return arrival

    def transfer_done(self, now_ns):
        """The HCA completed our transfer: record the latency, free the server."""
        req = self.current
        self.latencies.append((now_ns, now_ns - req.arrival_ns))
        self.completed += 1
        self.current = None
        self.transfer = None
        self.state = IDLE
        if req.client is not None:
            heapq.heappush(self._clients, (now_ns + self._think, req.client))

    def run(self, ns):
        """The VM ran ``ns`` on its vCPU (compute or polling)."""
        if self.state == COMPUTE:
            self.compute_left -= ns
