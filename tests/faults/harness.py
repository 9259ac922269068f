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

"""What the fault suite runs the agent on, and how it measures a fault.

The agent is the product's own :class:`resex_agent.loop.Agent`, built by
:func:`resex_agent.builder.build_agent` with its real parts: the knob journal in a
temporary state directory, the watchdog on every hypervisor call, the
background publisher and a real board (a SQLite file, or a real etcd). The
host is the product's simulated host (:class:`resex_libvirt.sim.host.SimHost`,
the paper's testbed, whose knobs can be read back: libvirt's ``test:///``
driver has no cap knob) following the wall clock (:class:`WallClock`), so
every timeout, lock and stop is real time.

A hung libvirtd is emulated by :class:`HangingHost`: the simulated host
wrapped by a hypervisor whose calls block while ``hang()`` is in force,
which is what a libvirt client does while libvirtd is stopped (SIGSTOP) or
wedged. Everything else is real.

A fault's figures (:class:`FaultResult`):

``lost``
    control intervals the loop did not run at all (its deadline skipped)
    between the fault's start and the end of its recovery;
``held``
    intervals the loop ran but held every knob (hypervisor unavailable);
``wrong``
    VMs whose knobs in force differ, once recovered, from what they must be
    (the agent's last decision while it runs; the originals after it stops);
``recovery_s``
    seconds from the end of the fault until the agent is whole again (a
    report published, a knob written, a second agent gone...).
"""

import dataclasses
import os
import shutil
import tempfile
import threading
import time

from resex_agent import builder
from resex_agent import clock as clock_mod
from resex_agent import conf as agent_conf
from resex_agent import journal as journal_mod
from resex_agent import watchdog
from resex_libvirt.sim import host as sim_host
from resex_libvirt.sim import scenario as scenario_mod
from tests import machine

from oslo_config import cfg

SCENARIO = "paper_64k_vs_2m"
LOOP_THREAD = "agent-under-fault"


@dataclasses.dataclass
class FaultResult:
    fault: str
    lost: int
    held: int
    wrong: int
    recovery_s: float
    note: str = ""
    loop_waited: bool = False
    details: dict = dataclasses.field(default_factory=dict)


class WallClock(clock_mod.RealClock):
    """Real time, with the simulated host's model advanced to each deadline."""

    def __init__(self, host):
        self._host = host
        self._origin = time.monotonic()

    def now(self):
        return time.monotonic() - self._origin

    def sleep_until(self, deadline, stop_event=None):
        self._host.advance_to(deadline)
        delay = deadline - self.now()
        if delay <= 0:
            return
        if stop_event is not None:
            stop_event.wait(delay)
        else:
            time.sleep(delay)


class HangingHost:
    """The simulated host behind a hypervisor whose calls block while hung.

    Emulates a hung libvirtd (stopped with SIGSTOP, or wedged): every call
    made while :meth:`hang` is in force blocks until :meth:`release`.
    """

    def __init__(self, inner):
        self.inner = inner
        self._go = threading.Event()
        self._go.set()
        self.blocked = 0

    def hang(self):
        self._go.clear()

    def release(self):
        self._go.set()

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr) or name in ("advance_to", "clock", "uuid_of", "name_of"):
            return attr

        def call(*args, **kwargs):
            if not self._go.is_set():
                self.blocked += 1
                self._go.wait()
            return attr(*args, **kwargs)
        return call


def make_conf(**groups):
    conf = cfg.ConfigOpts()
    agent_conf.register_opts(conf)
    conf([], project="resex")
    conf.set_override("url", "", group="board")
    for group, values in groups.items():
        for key, value in values.items():
            conf.set_override(key, value, group=group)
    return conf


class Run:
    """One agent on the wall-clock simulated host, run on a thread."""

    def __init__(self, board_url="", interval_s=0.1, epoch_s=0.5, call_timeout_s=0.5,
                 state_dir=None, policy="io_shares"):
        self.tmp = tempfile.mkdtemp(prefix="resex-faults-")
        self.state_dir = state_dir or self.tmp
        # The paper's market (cap_consent = all): its interferer, which never
        # opted in, is capped, so every fault has knobs to keep and restore.
        self.conf = make_conf(
            agent={"interval": interval_s, "epoch": epoch_s,
                   "hypervisor_call_timeout": call_timeout_s, "shutdown_timeout": 5.0,
                   "cap_consent": "all"},
            board={"url": board_url}, market={"policy": policy})
        scenario = scenario_mod.load(SCENARIO).with_duration(3600.0)
        self.sim = sim_host.SimHost(scenario)
        self.originals = {uuid: self.sim.get_knobs(uuid) for uuid in self.sim.vms()}
        self.host = HangingHost(self.sim)
        self.dog = watchdog.Watchdog(call_timeout_s, name="libvirt")
        parts = builder.Parts()
        parts.hypervisor = watchdog.Guarded(self.host, self.dog)
        parts.fabric = watchdog.Guarded(self.host, self.dog, owns=False)
        parts.watchdog = self.dog
        parts.latency_sources = [self.sim]
        parts.clock = WallClock(self.sim)
        parts.background_publish = True     # real time, as on libvirt
        parts.interval_s, parts.epoch_s = interval_s, epoch_s
        parts.journal = journal_mod.Journal(os.path.join(self.state_dir, "journal.json"))
        self.board_threads = set()
        if board_url:
            builder._board(self.conf, parts)
            publish = parts.board.publish

            def recorded(report):
                self.board_threads.add(threading.current_thread().name)
                return publish(report)
            parts.board.publish = recorded
        self.parts = parts
        self.agent = builder.build_agent(self.conf, parts)
        self.thread = None

    @property
    def journal(self):
        return self.parts.journal

    @property
    def loop_waited_on_board(self):
        """True if a board call ever ran on the control loop's thread."""
        return LOOP_THREAD in self.board_threads or \
            threading.main_thread().name in self.board_threads

    def start(self):
        self.thread = threading.Thread(target=self.agent.run, name=LOOP_THREAD,
                                       daemon=True)
        self.thread.start()
        return self

    def settle(self, epochs=2, timeout=30.0):
        """Wait until ``epochs`` more epochs closed and every VM has knobs written."""
        target = self.agent.epochs + epochs
        machine.seconds_until(lambda: self.agent.epochs >= target and self.applied(), timeout)

    def applied(self):
        return {uuid: rec.applied for uuid, rec in self.agent.vms.items()
                if rec.applied is not None}

    def stop(self):
        self.agent.stop()
        if self.thread is not None:
            self.thread.join(30)
        started = time.monotonic()
        self.agent.shutdown()
        return time.monotonic() - started

    def close(self):
        shutil.rmtree(self.tmp, True)

    # -- measures ---------------------------------------------------------------------
    def mark(self):
        a = self.agent
        return (a.skipped_intervals, a.held_intervals)

    def since(self, mark):
        a = self.agent
        return a.skipped_intervals - mark[0], a.held_intervals - mark[1]

    def caps_wrong(self):
        """VMs whose knobs in force differ from the agent's last write."""
        wrong = 0
        for uuid, (cap, weight) in self.applied().items():
            now = self.sim.get_knobs(uuid)
            in_force = None if now["cap"] == 0 else now["cap"]
            if weight != now["weight"] or not _same_cap(cap, in_force):
                wrong += 1
        return wrong

    def not_original(self):
        """VMs whose knobs in force are not their originals (after a stop)."""
        return sum(1 for uuid, params in self.originals.items()
                   if self.sim.get_knobs(uuid) != params)


def _same_cap(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) < 1e-6
