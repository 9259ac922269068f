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

"""A libvirt connection that survives libvirtd restarts.

* Opened from a URI (``qemu:///system``, ``xen:///system``, ``test:///...``).
* Errors are translated at this boundary (as ceilometer's libvirt
  ``retry_on_disconnect``): ``VIR_ERR_NO_DOMAIN`` becomes
  :class:`~resex_libvirt.exceptions.VMGone`, a lost connection
  :class:`~resex_libvirt.exceptions.HypervisorUnavailable`, anything else
  :class:`~resex_libvirt.exceptions.HypervisorError`, always with the libvirt
  error chained.
* Only disconnections are retried: :meth:`Connection.call` reopens once and
  repeats the call. Reopening after a failed open waits an exponentially
  growing delay (``backoff_min`` doubling up to ``backoff_max``) but never
  sleeps: until the delay has passed, calls fail fast with
  ``HypervisorUnavailable`` so the agent loop keeps its deadlines.
* Domain events (lifecycle, metadata change) where the driver sends them:
  libvirt's default event implementation is registered before the first
  ``open()`` (libvirt requires it, "virEventRegisterDefaultImpl") and
  ``virEventRunDefaultImpl()`` runs in one daemon thread shared by every
  connection of the process, stopped when the last one closes. Event
  callbacks are re-registered after each reconnect. The same loop drives
  libvirt's keepalive, so a dead libvirtd is noticed even between calls.
"""

import contextlib
import logging
import threading
import time

import libvirt

from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

#: Error codes that mean the connection itself is gone.
_CONNECTION_CODES = frozenset((
    libvirt.VIR_ERR_NO_CONNECT,
    libvirt.VIR_ERR_INVALID_CONN,
))
#: Error codes that mean a lost connection when raised by the RPC layer.
_RPC_CODES = frozenset((
    libvirt.VIR_ERR_SYSTEM_ERROR,
    libvirt.VIR_ERR_INTERNAL_ERROR,
    libvirt.VIR_ERR_RPC,
))
_RPC_DOMAINS = frozenset((libvirt.VIR_FROM_REMOTE, libvirt.VIR_FROM_RPC))


def is_disconnection(exc):
    """True when a ``libvirtError`` means the connection to libvirtd is lost."""
    code = exc.get_error_code()
    if code in _CONNECTION_CODES:
        return True
    return code in _RPC_CODES and exc.get_error_domain() in _RPC_DOMAINS


def translate(exc, what):
    """The project's exception for a ``libvirtError`` met while doing ``what``."""
    code = exc.get_error_code()
    message = "%s: %s" % (what, exc.get_error_message() or exc)
    if code == libvirt.VIR_ERR_NO_DOMAIN:
        return exceptions.VMGone(message)
    if is_disconnection(exc):
        return exceptions.HypervisorUnavailable(message)
    return exceptions.HypervisorError(message)


def _quiet_errors():
    """Send libvirt's own error printing to the debug log (errors are raised anyway)."""
    libvirt.registerErrorHandler(
        lambda ctx, err: LOG.debug("libvirt: %s", err[2] if len(err) > 2 else err), None)


class _EventLoop:
    """libvirt's default event loop in one daemon thread, reference counted."""

    def __init__(self):
        self._lock = threading.Lock()
        self._registered = False
        self._users = 0
        self._thread = None
        self._stop = None

    def register(self):
        """Register the default implementation (once; before any ``open()``)."""
        with self._lock:
            if not self._registered:
                libvirt.virEventRegisterDefaultImpl()
                self._registered = True

    def acquire(self):
        self.register()
        with self._lock:
            self._users += 1
            if self._thread is None:
                self._stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._stop,), name="libvirt-events", daemon=True)
                self._thread.start()

    def release(self):
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._thread is None:
                return
            thread, stop = self._thread, self._stop
            self._thread = None
            stop.set()
            # A zero timeout wakes virEventRunDefaultImpl() so the thread sees the flag.
            timer = libvirt.virEventAddTimeout(0, lambda timer, opaque: None, None)
        thread.join(5.0)
        libvirt.virEventRemoveTimeout(timer)

    @staticmethod
    def _run(stop):
        while not stop.is_set():
            try:
                libvirt.virEventRunDefaultImpl()
            except libvirt.libvirtError:
                LOG.exception("libvirt event loop iteration failed")
                stop.wait(0.1)

    @property
    def users(self):
        """Open connections that use the loop."""
        return self._users

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()


EVENT_LOOP = _EventLoop()


class Connection:
    """One libvirt connection with translation, reconnects and domain events.

    ``events`` turns on the event loop and keepalive; a driver that does not
    send events works the same (callbacks simply never fire). ``clock`` is
    the monotonic clock used for the backoff (tests pass their own).
    """

    def __init__(self, uri, backoff_min=1.0, backoff_max=60.0, events=True,
                 keepalive_interval=5, keepalive_count=3, clock=time.monotonic):
        if backoff_min <= 0 or backoff_max < backoff_min:
            raise exceptions.ConfigError(
                "reconnect backoff must satisfy 0 < min (%s) <= max (%s)"
                % (backoff_min, backoff_max))
        self.uri = uri
        self.backoff_min = float(backoff_min)
        self.backoff_max = float(backoff_max)
        self._events = events
        self._keepalive = (keepalive_interval, keepalive_count)
        self._clock = clock
        self._lock = threading.RLock()
        self._conn = None
        self._lost = False
        self._failures = 0
        self._next_attempt = 0.0
        self._callbacks = {}      # event_id -> [callback]: libvirt takes one per event id
        self._callback_ids = []
        self._reconnect_listeners = []
        self._closed = False
        self.opens = 0
        _quiet_errors()
        if events:
            EVENT_LOOP.acquire()

    # -- state -----------------------------------------------------------------

    @property
    def connected(self):
        with self._lock:
            return self._conn is not None and not self._lost

    @property
    def failures(self):
        """Consecutive failed opens since the last success."""
        return self._failures

    def retry_delay(self):
        """Seconds until the next open may be tried (0 when it may be tried now)."""
        return max(0.0, self._next_attempt - self._clock())

    # -- opening -------------------------------------------------------------

    def get(self):
        """The open ``virConnect``, opening it if needed.

        Raises ``HypervisorUnavailable`` when libvirtd cannot be reached or
        the backoff delay since the last failed open has not passed.
        """
        with self._lock:
            if self._closed:
                raise exceptions.HypervisorUnavailable("connection to %s is closed" % self.uri)
            if self._lost and self._conn is not None:
                self._drop()
            if self._conn is not None:
                return self._conn
            now = self._clock()
            if now < self._next_attempt:
                raise exceptions.HypervisorUnavailable(
                    "libvirt at %s unavailable; next attempt in %.1f s"
                    % (self.uri, self._next_attempt - now))
            try:
                conn = libvirt.open(self.uri)
            except libvirt.libvirtError as exc:
                self._failures += 1
                delay = min(self.backoff_max, self.backoff_min * 2 ** (self._failures - 1))
                self._next_attempt = now + delay
                LOG.warning("cannot open libvirt at %s (attempt %d, next in %.1f s): %s",
                            self.uri, self._failures, delay, exc)
                raise exceptions.HypervisorUnavailable(
                    "cannot open libvirt at %s: %s" % (self.uri, exc)) from exc
            if self._failures:
                LOG.info("libvirt at %s reachable again after %d failed attempts",
                         self.uri, self._failures)
            self._failures = 0
            self._next_attempt = 0.0
            self._lost = False
            self._conn = conn
            self.opens += 1
            self._setup(conn)
            first = self.opens == 1
        if not first:
            for listener in list(self._reconnect_listeners):
                listener()
        return conn

    def _setup(self, conn):
        if not self._events:
            return
        try:
            conn.registerCloseCallback(self._on_close, None)
        except libvirt.libvirtError as exc:
            LOG.debug("no close callback on %s: %s", self.uri, exc)
        if self._keepalive[0] > 0:
            try:
                conn.setKeepAlive(*self._keepalive)
            except libvirt.libvirtError as exc:
                LOG.debug("no keepalive on %s: %s", self.uri, exc)
        self._callback_ids = []
        for event_id in self._callbacks:
            self._register(conn, event_id)

    def _register(self, conn, event_id):
        # libvirt refuses a second registration of the same event id on one
        # connection ("event callback already tracked"): one relay per id
        # fans out to every callback.
        def relay(_conn, dom, *args):
            uuid = dom.UUIDString()
            for callback in list(self._callbacks.get(event_id, ())):
                try:
                    callback(uuid, *args[:-1])
                except Exception:
                    LOG.exception("domain event callback failed")
        try:
            self._callback_ids.append(conn.domainEventRegisterAny(None, event_id, relay, None))
        except libvirt.libvirtError as exc:
            LOG.info("no domain event %d from %s: %s", event_id, self.uri, exc)

    def _on_close(self, conn, reason, opaque):
        # Runs on the event thread inside libvirt's client lock: never take
        # self._lock here (the caller's thread may hold it while closing the
        # connection, which needs the client lock: a deadlock). A plain flag
        # assignment is atomic.
        LOG.warning("libvirt connection to %s closed (reason %d)", self.uri, reason)
        self._lost = True

    def _drop(self):
        """Forget a lost connection; the next :meth:`get` reopens at once."""
        conn, self._conn = self._conn, None
        self._lost = False
        ids, self._callback_ids = self._callback_ids, []
        if conn is None:
            return
        # Each registered domain event holds a reference to the connection: a
        # connection closed with its events still registered is never freed,
        # and its socket stays open (one descriptor per libvirtd restart, the
        # soak's figure). The client drops a callback before asking the dead
        # daemon, so deregistering works on a lost connection too.
        for callback_id in ids:
            # KeyError: libvirt-python already forgot it (deregistered twice).
            try:
                conn.domainEventDeregisterAny(callback_id)
            except (libvirt.libvirtError, KeyError):
                pass
        try:
            conn.unregisterCloseCallback()
        except libvirt.libvirtError:
            pass
        try:
            conn.close()
        except libvirt.libvirtError:
            pass

    # -- calls ---------------------------------------------------------------

    @contextlib.contextmanager
    def translated(self, what):
        """Translate ``libvirtError`` raised inside into the project's exceptions."""
        try:
            yield
        except libvirt.libvirtError as exc:
            error = translate(exc, what)
            if isinstance(error, exceptions.HypervisorUnavailable):
                with self._lock:
                    self._lost = True
            raise error from exc

    def call(self, what, fn, *args):
        """``fn(virConnect, *args)`` with translation; retried once after a disconnection.

        ``fn`` must look domains up itself: domain objects do not survive a
        reconnect.
        """
        was_connected = self.connected
        try:
            conn = self.get()
            with self.translated(what):
                return fn(conn, *args)
        except exceptions.HypervisorUnavailable:
            if not was_connected:
                raise
            LOG.info("lost libvirt at %s during %s; reconnecting", self.uri, what)
        conn = self.get()
        with self.translated(what):
            return fn(conn, *args)

    # -- events --------------------------------------------------------------

    def on_domain_event(self, event_id, callback):
        """Call ``callback(uuid, *event args)`` for domain event ``event_id``.

        Registered now if connected and again after every reconnect. Runs on
        the event thread: keep it short and thread-safe.
        """
        with self._lock:
            first = event_id not in self._callbacks
            self._callbacks.setdefault(event_id, []).append(callback)
            if first and self._conn is not None and self._events:
                self._register(self._conn, event_id)

    def on_reconnect(self, listener):
        """Call ``listener()`` after every reopen following a lost connection."""
        self._reconnect_listeners.append(listener)

    @property
    def events_enabled(self):
        return self._events

    def close(self):
        """Close the connection and release the event loop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._drop()
        if self._events:
            EVENT_LOOP.release()
