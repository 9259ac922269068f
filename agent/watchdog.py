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

"""A bounded wait on every hypervisor call the control loop makes.

libvirt's calls block while libvirtd is stopped or busy (a hung daemon, a
domain being destroyed): run on the loop, one such call would freeze the
control of every VM on the host and make the agent deaf to SIGTERM.
:class:`Watchdog` runs each call on one worker thread (native, like every
thread of the agent) and waits at most ``timeout_s`` for it:

* a call that returns in time returns its value or raises its exception, as
  if made directly;
* a call that does not is abandoned: the hypervisor is marked *unavailable*
  and the caller gets :class:`~resex_libvirt.exceptions.HypervisorUnavailable`.
  The loop already treats that error as "hold the knobs, skip the interval"
  (:class:`resex_libvirt.control.Controller`), so the VMs keep the last
  knobs written, and the loop keeps its deadlines;
* while the abandoned call has not returned, every further call fails at
  once with the same error: calls are never queued behind a hung one (a
  libvirt connection serialises its calls anyway);
* when the abandoned call finally returns, the hypervisor is available again
  (one info line with how long it was out), and the next call goes through.

A *sweep* (a method :class:`Guarded` is given as ``sweeps``: the VM list, the CPU
and interface statistics) is awaited only ``sweep_wait_s``: libvirtd holds
every call that walks the domain list while a domain is created or
destroyed (1-2 s for a TCG guest), which is busy, not hung. A sweep that
overruns that wait raises :class:`~resex_libvirt.exceptions.SampleLate`
(the loop skips the interval, the knobs are held) and goes on; the next
call of the same sweep takes its result once it is back. Only beyond
``timeout_s`` is it abandoned as above.

:class:`Guarded` wraps an adapter (the hypervisor, the fabric monitor when
it reads libvirt) so that every call of its interface goes through one
watchdog; it forwards the adapter's declared capabilities, nothing else.
"""

import logging
import threading
import time

from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)


class _Call:
    __slots__ = ("fn", "args", "kwargs", "done", "value", "error", "name", "started")

    def __init__(self, name, fn, args, kwargs, started=0.0):
        self.name = name
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.done = threading.Event()
        self.value = None
        self.error = None
        self.started = started


class Watchdog:
    """Runs calls on a worker thread with a bounded wait (see the module docstring)."""

    def __init__(self, timeout_s, name="hypervisor", clock=time.monotonic, sweep_wait_s=None):
        self.timeout_s = float(timeout_s)
        #: How long a sweep is awaited before it is late (``None``: like any call).
        self.sweep_wait_s = sweep_wait_s
        self.name = name
        self._late = None          # a sweep that overran sweep_wait_s and goes on
        self.late_sweeps = 0
        self._clock = clock
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._pending = None
        self._stuck = None
        self._stuck_since = None
        self._closed = False
        self._thread = None
        self.timeouts = 0

    @property
    def available(self):
        """False while a call that overran its bound has not returned."""
        with self._lock:
            return self._stuck is None

    def sweep(self, name, fn, *args, **kwargs):
        """A sweep: ``fn(*args, **kwargs)`` awaited ``sweep_wait_s``, else ``SampleLate``."""
        if self.sweep_wait_s is None or self.sweep_wait_s >= self.timeout_s:
            return self.call(name, fn, *args, **kwargs)
        with self._lock:
            late = self._late
        if late is None:
            return self.call(name, fn, *args, _wait=self.sweep_wait_s, **kwargs)
        waited = self._clock() - late.started
        if late.done.wait(max(0.0, min(self.sweep_wait_s, self.timeout_s - waited))):
            with self._lock:
                self._late = None
            if late.name != name:
                # Another sweep came back: this one starts now.
                return self.call(name, fn, *args, _wait=self.sweep_wait_s, **kwargs)
            return self._result(late)
        if self._clock() - late.started >= self.timeout_s:
            self._overran(late)
        raise exceptions.SampleLate("%s call %s still running after %.0f ms" % (
            self.name, late.name, 1000.0 * (self._clock() - late.started)))

    @staticmethod
    def _result(call):
        if call.error is not None:
            raise call.error
        return call.value

    def _overran(self, late):
        """A late sweep passed ``timeout_s``: it is stuck, the hypervisor unavailable."""
        with self._lock:
            if not late.done.is_set() and self._late is late:
                self._late = None
                self._stuck, self._stuck_since = late, late.started
                self.timeouts += 1
                LOG.error("%s call %s did not return within %.1f s: hypervisor marked "
                          "unavailable, every VM keeps its last knobs",
                          self.name, late.name, self.timeout_s)
        if not late.done.is_set():
            raise exceptions.HypervisorUnavailable(
                "%s call %s did not return within %.1f s"
                % (self.name, late.name, self.timeout_s))

    def call(self, name, fn, *args, _wait=None, **kwargs):
        """``fn(*args, **kwargs)`` on the worker, waiting at most ``timeout_s``."""
        with self._lock:
            late = self._late
            if late is not None and late.done.is_set():
                late = None         # taken by the next sweep of its name
        if late is not None and _wait is None:
            # The worker is busy with a late sweep (libvirtd busy with one
            # domain): this call goes on a thread of its own meanwhile.
            if self._clock() - late.started >= self.timeout_s:
                self._overran(late)
            return self._aside(_Call(name, fn, args, kwargs, self._clock()))
        call = _Call(name, fn, args, kwargs, self._clock())
        with self._lock:
            if self._stuck is not None:
                raise exceptions.HypervisorUnavailable(
                    "%s call %s has not returned for %.1f s" % (
                        self.name, self._stuck.name, self._clock() - self._stuck_since))
            if self._closed:
                raise exceptions.HypervisorUnavailable("%s watchdog closed" % self.name)
            self._ensure_worker()
            self._pending = call
            self._work.notify()
        if _wait is not None and not call.done.wait(_wait):
            with self._lock:
                if not call.done.is_set() and self._pending is not call:
                    self._late = call
                    self.late_sweeps += 1
                    raise exceptions.SampleLate("%s call %s still running after %.0f ms" % (
                        self.name, name, 1000.0 * _wait))
        if not call.done.wait(self.timeout_s):
            with self._lock:
                if not call.done.is_set():
                    if self._pending is call:
                        self._pending = None    # never started: nothing is stuck
                    else:
                        self._stuck = call
                        self._stuck_since = self._clock() - self.timeout_s
                    self.timeouts += 1
                    LOG.error("%s call %s did not return within %.1f s: hypervisor marked "
                              "unavailable, every VM keeps its last knobs",
                              self.name, name, self.timeout_s)
                    raise exceptions.HypervisorUnavailable(
                        "%s call %s did not return within %.1f s"
                        % (self.name, name, self.timeout_s))
        return self._result(call)

    def _aside(self, call):
        """Run ``call`` on a thread of its own, waiting at most ``timeout_s``."""
        threading.Thread(target=self._execute, args=(call,), name="%s-aside" % self.name,
                         daemon=True).start()
        if not call.done.wait(self.timeout_s):
            with self._lock:
                self.timeouts += 1
                if not call.done.is_set() and self._stuck is None:
                    # Still running: a write it makes may land at any time,
                    # so nothing else goes until it has returned.
                    self._stuck = call
                    self._stuck_since = self._clock() - self.timeout_s
            LOG.error("%s call %s did not return within %.1f s: hypervisor marked "
                      "unavailable", self.name, call.name, self.timeout_s)
            raise exceptions.HypervisorUnavailable(
                "%s call %s did not return within %.1f s"
                % (self.name, call.name, self.timeout_s))
        return self._result(call)

    def _ensure_worker(self):
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="%s-calls" % self.name,
                                            daemon=True)
            self._thread.start()

    def _run(self):
        while True:
            with self._lock:
                while self._pending is None and not self._closed:
                    self._work.wait()
                if self._pending is None:
                    return
                call, self._pending = self._pending, None
            self._execute(call)

    def _execute(self, call):
        """Run ``call``, keep its value or exception, and mark it done."""
        try:
            call.value = call.fn(*call.args, **call.kwargs)
        except BaseException as exc:    # handed to the caller, never lost
            call.error = exc
        with self._lock:
            call.done.set()
            self._returned(call)

    def _returned(self, call):
        """``call`` returned (lock held): if it was the stuck one, the hypervisor is back."""
        if self._stuck is call:
            LOG.warning("%s call %s returned after %.1f s: hypervisor available again",
                        self.name, call.name, self._clock() - self._stuck_since)
            self._stuck = self._stuck_since = None

    def close(self):
        """Let the worker end once idle (a stuck worker is a daemon thread: never joined)."""
        with self._lock:
            self._closed = True
            self._work.notify()


class Guarded:
    """An adapter whose every call goes through a :class:`Watchdog`.

    ``inner`` is a hypervisor or a fabric monitor (the simulated host is
    both). The proxy forwards exactly the methods written below, those of
    :class:`~resex_libvirt.hypervisor.base.Hypervisor`, of
    :class:`~resex_libvirt.fabric.base.FabricMonitor` and of their
    capabilities, and ``inner``'s declared ``capabilities`` (data, read
    once): a name it was not given is an ``AttributeError``, whatever
    ``inner`` has. A capability's method is only called where ``inner``
    declares the capability. The methods named in ``sweeps`` are awaited as
    sweeps (:meth:`Watchdog.sweep`).

    ``close()`` goes through the watchdog too (a hung libvirtd must not hang the exit), then
    closes the watchdog if this wrapper ``owns`` it (adapters sharing one
    watchdog: the hypervisor owns it, the fabric monitor does not).
    """

    def __init__(self, inner, watchdog, owns=True, sweeps=()):
        self._inner = inner
        self._watchdog = watchdog
        self._owns = owns
        self._sweeps = frozenset(sweeps)
        self.capabilities = frozenset(inner.capabilities)

    def _call(self, name, *args):
        run = self._watchdog.sweep if name in self._sweeps else self._watchdog.call
        return run(name, getattr(self._inner, name), *args)

    # -- Hypervisor -------------------------------------------------------------
    def vms(self):
        return self._call("vms")

    def cpu_times(self):
        return self._call("cpu_times")

    def set_knobs(self, uuid, cap_pct, weight):
        return self._call("set_knobs", uuid, cap_pct, weight)

    def get_knobs(self, uuid):
        return self._call("get_knobs", uuid)

    def original_knobs(self, uuid):
        return self._call("original_knobs", uuid)

    def restore_knobs(self, uuid, params):
        return self._call("restore_knobs", uuid, params)

    def caps_in_force(self):
        return self._call("caps_in_force")

    def adopt_operator_values(self, values):
        return self._call("adopt_operator_values", values)

    def pcpus(self):
        return self._call("pcpus")

    def vcpu_times(self):
        return self._call("vcpu_times")

    # -- the hypervisor's capabilities -------------------------------------------
    @property
    def generation(self):
        """``inner``'s counter, read directly (an attribute: no call is made)."""
        return self._inner.generation

    def original_updates(self):
        return self._call("original_updates")

    def cpu_times_rows(self, rows):
        return self._call("cpu_times_rows", rows)

    def delay_times_rows(self, rows):
        return self._call("delay_times_rows", rows)

    # -- FabricMonitor and its capability ----------------------------------------
    def counters(self, vms):
        return self._call("counters", vms)

    def link(self):
        return self._call("link")

    def counters_rows(self, rows):
        return self._call("counters_rows", rows)

    def close(self):
        try:
            self._watchdog.call("close", self._inner.close)
        except exceptions.HypervisorUnavailable as exc:
            LOG.warning("not closing %r: %s", self._inner, exc)
        finally:
            if self._owns:
                self._watchdog.close()
