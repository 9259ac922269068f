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

"""Publishing the host report off the control loop.

A price board is another process or another host: a SQLite file locked by a
reader, etcd stopped or partitioned. Waiting for it on the control loop cost
most of the intervals of an outage, so the loop only hands each epoch's
report to a :class:`Publisher` and goes on. The publisher keeps **only the
latest** report (no queue: an old report is worth nothing once a newer one
exists) and a native thread sends it, with the board's own timeouts. While
the board is down the loop controls the host as usual; when the board comes
back the latest report is sent at once.

The board may also be unreachable when the agent starts (etcd down, a
corrupt SQLite file, a read-only directory): :class:`DeferredBoard` opens
it on first use and again after every failure, so that the agent starts,
controls locally, and publishes once the board can be opened.

``Publisher(board, policy, background=False)`` publishes inline, on the
caller's thread: the simulated host runs faster than real time, where every
epoch's report must be offered to the board in order.
"""

import logging
import threading
import time

from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)


class DeferredBoard:
    """A board opened on first use, reopened after it failed to open.

    ``opener()`` returns an open board or raises
    :class:`~resex_libvirt.exceptions.BoardUnavailable` (or any error: a
    corrupt file surfaces as whatever the backend raises). Opening is
    retried at most every ``retry_s`` seconds; meanwhile every call raises
    ``BoardUnavailable`` at once.
    """

    def __init__(self, opener, url="", retry_s=5.0, clock=time.monotonic):
        self._opener = opener
        self.url = url
        self.retry_s = retry_s
        self._clock = clock
        self._board = None
        self._next_try = 0.0
        self._error = None
        self._lock = threading.Lock()

    def open(self):
        """The open board, or ``BoardUnavailable``."""
        with self._lock:
            if self._board is not None:
                return self._board
            now = self._clock()
            if now < self._next_try:
                raise exceptions.BoardUnavailable(self._error or "board not open yet")
            try:
                self._board = self._opener()
            except exceptions.BoardUnavailable as exc:
                self._fail(now, str(exc))
                raise
            except exceptions.ConfigError:
                raise       # a URL that can never work: the start fails
            except Exception as exc:
                self._fail(now, "cannot open the board %s: %s" % (self.url, exc))
                raise exceptions.BoardUnavailable(self._error) from exc
            self._error = None
            return self._board

    def _fail(self, now, message):
        self._error = message
        self._next_try = now + self.retry_s

    @property
    def is_open(self):
        return self._board is not None

    def publish(self, report):
        return self.open().publish(report)

    def count(self):
        return self.open().count()

    def snapshot(self):
        return self.open().snapshot()

    def close(self):
        with self._lock:
            board, self._board = self._board, None
        if board is not None:
            board.close()


class Publisher:
    """Sends the latest report to ``board`` (see the module docstring).

    ``policy`` (optional, :class:`resex_libvirt.board.publish_policy.PublishPolicy`)
    decides whether a report is worth sending (on change past a fleet size);
    ``on_result(ok, seconds)`` (optional) is told every attempt, for metrics.
    """

    def __init__(self, board, policy=None, background=True, clock=time.monotonic,
                 on_result=None):
        self.board = board
        self.policy = policy
        self.background = background
        self._clock = clock
        self.on_result = on_result
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._latest = None
        self._closed = False
        self._busy = False
        self._thread = None
        self._down_logged = False
        self._fleet_counted_at = None
        self.published = 0
        self.failures = 0
        self.skipped = 0
        self.last_published = None

    # -- the loop's side ---------------------------------------------------------
    def offer(self, report):
        """Hand over this epoch's report; returns at once in the background mode."""
        if not self.background:
            self._send(report)
            return
        with self._lock:
            if self._closed:
                return
            if self._latest is not None:
                self.skipped += 1       # superseded before it could be sent
            self._latest = report
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="board-publisher",
                                                daemon=True)
                self._thread.start()
            self._wake.notify()

    def flush(self, timeout_s):
        """Wait up to ``timeout_s`` for the pending report to be sent; True if none is left."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._latest is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return False
                self._wake.wait(left)
            return True

    def close(self, timeout_s=2.0):
        """Send what is pending (within ``timeout_s``) and stop the thread.

        The board is not the publisher's: it is closed by its owner (the
        agent's parts, :class:`resex_agent.builder.Parts`), after this.
        """
        if not self.background:
            return
        self.flush(timeout_s)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                LOG.warning("the board did not answer within %.1f s; not waiting for it",
                            timeout_s)

    # -- the thread ----------------------------------------------------------------
    def _run(self):
        while True:
            with self._lock:
                while self._latest is None and not self._closed:
                    self._wake.wait()
                if self._latest is None:
                    return
                report, self._latest = self._latest, None
                self._busy = True
            try:
                self._send(report)
            finally:
                with self._lock:
                    self._busy = False
                    self._wake.notify_all()

    def _send(self, report):
        policy = self.policy
        now = self._clock()
        if policy is not None and not policy.should_publish(report, now):
            return
        started = time.monotonic()
        try:
            self.board.publish(report)
            if policy is not None:
                policy.published(report, now)
                # Past a fleet size the agent publishes on change only; the
                # fleet (this host included) is counted after the first
                # publish and then every maximum interval.
                if self._fleet_counted_at is None or \
                        now - self._fleet_counted_at >= policy.max_interval_s:
                    self._fleet_counted_at = now
                    policy.observe_fleet(self.board.count())
        except exceptions.BoardUnavailable as exc:
            self._failed(started)
            if not self._down_logged:
                LOG.warning("price board unavailable, controlling locally and publishing "
                            "when it is back: %s", exc)
                self._down_logged = True
            return
        except Exception:
            self._failed(started)
            LOG.exception("could not publish the host report")
            return
        self.published += 1
        self.last_published = report
        if self._down_logged:
            LOG.info("price board reachable again; epoch %d published", report.epoch)
            self._down_logged = False
        self._tell(True, time.monotonic() - started)

    def _failed(self, started):
        self.failures += 1
        self._tell(False, time.monotonic() - started)

    def _tell(self, ok, seconds):
        if self.on_result is not None:
            try:
                self.on_result(ok, seconds)
            except Exception:
                LOG.debug("publish result callback failed", exc_info=True)
