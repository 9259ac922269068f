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

    def next_arrival_ns(self):
        """Time of the next arrival, or ``None``."""
        t = self._next_arrival
        if self._clients:
            c = self._clients[0][0]
            t = c if t is None or c < t else t
        return t

    def admit_due(self, now_ns):
        """Queue every arrival due at or before ``now_ns``; True if any."""
        admitted = False
        while self._clients and self._clients[0][0] <= now_ns:
            t, c = heapq.heappop(self._clients)
            self._enqueue(Request(t, c))
            admitted = True
        while self._next_arrival is not None and self._next_arrival <= now_ns:
            self._enqueue(Request(self._next_arrival, None))
            self._next_arrival += self._gap_ns()
            admitted = True
        return admitted

    def _enqueue(self, req):
        if len(self.queue) >= self.max_queue:
            self.dropped += 1
            if req.client is not None:
                # A closed-loop client whose request is refused tries again later.
                heapq.heappush(self._clients, (req.arrival_ns + self._think_ns() + 1,
                                               req.client))
            return
        self.queue.append(req)

    def _think_ns(self):
        return max(0, round(self.workload.think_us * 1000.0))

    # -- service -------------------------------------------------------------
    @property
    def wants_cpu(self):
        return self.state != IDLE

    def _compute_ns(self):
        base = self.workload.compute_us * 1000.0
        if self.compute_cv > 0:
            z = max(-3.0, min(3.0, self.rng.gauss(0.0, 1.0)))
            base *= 1.0 + self.compute_cv * z
        return max(0, round(base))

    def begin_next(self):
        """IDLE with a queued request -> COMPUTE; True if the state changed."""
        if self.state != IDLE or not self.queue:
            return False
        self.current = self.queue.popleft()
        self.compute_left = self._compute_ns()
        self.state = COMPUTE
        return True

    def post_due(self, now_ns, link, owner, transfer_cls):
        """COMPUTE finished -> post the transfer and POLL; True if the state changed."""
        if self.state != COMPUTE or self.compute_left > 0:
            return False
        self.transfer = transfer_cls(owner, self.workload.buffer_bytes, now_ns, self.current)
        link.post(self.transfer)
        self.state = POLL
        return True

    def transfer_done(self, now_ns):
        """The HCA completed our transfer: record the latency, free the server."""
        req = self.current
        self.latencies.append((now_ns, now_ns - req.arrival_ns))
        self.completed += 1
        self.current = None
        self.transfer = None
        self.state = IDLE
        if req.client is not None:
            heapq.heappush(self._clients, (now_ns + self._think_ns(), req.client))

    def run(self, ns):
        """The VM ran ``ns`` on its vCPU (compute or polling)."""
        if self.state == COMPUTE:
            self.compute_left -= ns
