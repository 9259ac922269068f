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

:class:`Guarded` wraps an adapter (the hypervisor, the fabric monitor when
it reads libvirt) so that every method call goes through one watchdog.
"""

import logging
import threading
import time

from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)


class _Call:
    __slots__ = ("fn", "args", "kwargs", "done", "value", "error", "name")

    def __init__(self, name, fn, args, kwargs):
        self.name = name
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.done = threading.Event()
        self.value = None
        self.error = None


class Watchdog:
    """Runs calls on a worker thread with a bounded wait (see the module docstring)."""

    def __init__(self, timeout_s, name="hypervisor", clock=time.monotonic):
        self.timeout_s = float(timeout_s)
        self.name = name
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

    def call(self, name, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the worker, waiting at most ``timeout_s``."""
        call = _Call(name, fn, args, kwargs)
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
        if call.error is not None:
            raise call.error
        return call.value

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
            try:
                call.value = call.fn(*call.args, **call.kwargs)
            except BaseException as exc:    # handed to the caller, never lost
                call.error = exc
            with self._lock:
                call.done.set()
                if self._stuck is call:
                    LOG.warning("%s call %s returned after %.1f s: hypervisor available "
                                "again", self.name, call.name,
                                self._clock() - self._stuck_since)
                    self._stuck = self._stuck_since = None

    def close(self):
        """Let the worker end once idle (a stuck worker is a daemon thread: never joined)."""
        with self._lock:
            self._closed = True
            self._work.notify()


class Guarded:
    """An adapter whose every method call goes through a :class:`Watchdog`.

    Attributes that are not callable are read directly. ``close()`` goes
    through the watchdog too (a hung libvirtd must not hang the exit), then
    closes the watchdog if this wrapper ``owns`` it (adapters sharing one
    watchdog: the hypervisor owns it, the fabric monitor does not).
    """

    def __init__(self, inner, watchdog, owns=True):
        self._inner = inner
        self._watchdog = watchdog
        self._owns = owns

    @property
    def inner(self):
        return self._inner

    @property
    def watchdog(self):
        return self._watchdog

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        watchdog = self._watchdog

        def guarded(*args, **kwargs):
            return watchdog.call(name, attr, *args, **kwargs)
        guarded.__name__ = name
        return guarded

    def close(self):
        close = getattr(self._inner, "close", None)
        try:
            if close is not None:
                self._watchdog.call("close", close)
        except exceptions.HypervisorUnavailable as exc:
            LOG.warning("not closing %r: %s", self._inner, exc)
        finally:
            if self._owns:
                self._watchdog.close()
