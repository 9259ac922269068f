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

"""The soak's schedule: which event runs when, scaled to the run's length.

Guests are created and destroyed every few seconds and the agent is sent
SIGHUP on a period; the restarts (libvirtd, an etcd member) are spread over
the run, so that both halves of a run have some and none falls on another.
A :class:`Plan` says how often; :func:`build` turns it into the events of a
run of ``seconds`` (no clock, no I/O: :mod:`tests.faults.soak` runs them).
"""

import dataclasses

CHURN = "churn"
SIGHUP = "sighup"
LIBVIRTD_RESTART = "libvirtd restart"
ETCD_RESTART = "etcd member restart"

#: The events that take away a part the agent depends on: control intervals lost
#: while one runs (and shortly after) are the fault's, the others are lost beyond them.
FAULTS = (LIBVIRTD_RESTART, ETCD_RESTART)


@dataclasses.dataclass(frozen=True)
class Plan:
    """How often each event comes; the restarts are counts per run, spread over it."""

    churn_every_s: float = 5.0
    sighup_every_s: float = 30.0
    libvirtd_restarts: int = 2
    etcd_restarts: int = 2

    def __post_init__(self):
        if self.churn_every_s < 0 or self.sighup_every_s < 0:
            raise ValueError("a period is 0 (never) or positive")
        if self.libvirtd_restarts < 0 or self.etcd_restarts < 0:
            raise ValueError("a count of restarts is 0 or positive")


@dataclasses.dataclass(frozen=True, order=True)
class Event:
    """``kind`` at ``at`` seconds from the start; ``index``: the how-manyth of its kind."""

    at: float
    kind: str
    index: int


def periodic(kind, every_s, seconds):
    """``kind`` every ``every_s`` s, the first after one period, all before ``seconds``."""
    if every_s <= 0:
        return []
    events = []
    at = every_s
    while at < seconds:
        events.append(Event(at, kind, len(events)))
        at = every_s * (len(events) + 1)
    return events


def spread(kind, count, seconds, phase):
    """``count`` of ``kind``, one in each ``count``-th of the run, ``phase`` into it (to 1 ms)."""
    return [Event(round(seconds * (i + phase) / count, 3), kind, i) for i in range(count)]


def build(seconds, plan=None):
    """Every event of a run of ``seconds`` under ``plan``, in the order they run.

    The libvirtd restarts fall two thirds into each of their shares of the
    run and the etcd restarts one third into theirs (with two of each over
    an hour: etcd at 10 and 40 minutes, libvirtd at 20 and 50).
    """
    plan = plan or Plan()
    if seconds <= 0:
        return []
    events = (periodic(CHURN, plan.churn_every_s, seconds)
              + periodic(SIGHUP, plan.sighup_every_s, seconds)
              + spread(LIBVIRTD_RESTART, plan.libvirtd_restarts, seconds, 2.0 / 3.0)
              + spread(ETCD_RESTART, plan.etcd_restarts, seconds, 1.0 / 3.0))
    return sorted(events)


def counts(events):
    """``{kind: number}`` of ``events``."""
    out = {}
    for event in events:
        out[event.kind] = out.get(event.kind, 0) + 1
    return out
