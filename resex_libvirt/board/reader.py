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

"""The scheduler's view of the board: one cache per process, kept by following the board.

nova-scheduler calls the filter once per host and the weigher once per
request, from several native threads (Nova 34 runs no eventlet). Reading the
board on that path would cost a range read per request (210 ms at 10,000
hosts on etcd). So one :class:`BoardReader` per process and board URL
(:func:`shared`) keeps a cache of every host's last record, maintained by
one daemon thread that **follows** the board (``mode="follow"``, the
default): the whole board once, then only what changed
(:meth:`~resex_libvirt.board.backend.Board.follow`: an etcd watch; the SQLite
rows changed since the last read, every ``refresh_interval``). After an error
the thread waits ``refresh_interval`` and starts over with a full read.
``mode="snapshot"`` re-reads the whole board every ``refresh_interval``
seconds (the behaviour of earlier releases, kept for comparison).

Each cached host is an :class:`Entry`: its report and its admission state
(:mod:`resex_libvirt.board.admission`: the congestion index smoothed with
time constant ``tau`` and latched with hysteresis ``hysteresis``), advanced
by the following thread when a newer record of the host arrives. Requests
read entries without a lock (one dict lookup; the thread replaces entries,
never mutates them).

* **Freshness is judged at read time by the record's ``ts``** (wall clock),
  never by whether a key exists: a record older than ``max_age`` is not
  returned. Entries older than ``max_age`` are dropped from the cache now and
  then (a decommissioned host).
* **Outage**: the cache is kept (its records age out one by one); the failure
  is logged once at WARNING, the recovery once at INFO.
* **First request not blind**: :meth:`BoardReader.start` waits for the first
  full read up to ``load_timeout`` seconds.
* **Untrusted records**: any compute node can write the board. A record that
  does not validate, or names another host than its key, is dropped by the
  board's :class:`~resex_libvirt.board.backend.RecordDecoder` (the key reads
  as having no record), logged, and counted (:attr:`BoardReader.rejected`);
  it never stops the follower nor reaches a request.
"""

import copy
import logging
import threading
import time

from resex_libvirt import board as board_mod
from resex_libvirt.board import admission as admission_mod
from resex_libvirt.board import backend
from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

MODES = ("follow", "snapshot")

_READERS = {}
_READERS_LOCK = threading.Lock()


class Entry:
    """A host as the scheduler sees it: its last record and its admission state.

    ``ts``, ``latched`` (the admission value, percent: refuse a threshold
    below it), ``sensitive_vms`` and ``blind`` (the agent could not see its
    hypervisor: treat the host as unknown) are copied out for the request
    path. ``link`` is ``None``, or the shared link's
    :class:`~resex_libvirt.board.links.Load` when a request's copy of the
    entry (:meth:`behind`) takes its ``latched`` from a congested link.
    """

    __slots__ = ("report", "admission", "ts", "latched", "sensitive_vms", "heavy_io_vms",
                 "blind", "link")

    def __init__(self, report, admission):
        self.report = report
        self.admission = admission
        self.ts = report.ts
        self.latched = admission.latched
        self.sensitive_vms = report.sensitive_vms
        self.heavy_io_vms = report.heavy_io_vms
        self.blind = report.blind
        self.link = None

    def behind(self, load):
        """This entry behind a shared link at ``load``: a copy, or itself if the host is worse.

        The copy's ``latched`` is the link's congestion and its ``link`` the
        :class:`~resex_libvirt.board.links.Load`; the reader's entry is not changed.
        """
        if load is None or load.congestion_pct <= self.latched:
            return self
        out = copy.copy(self)
        out.latched = load.congestion_pct
        out.link = load
        return out


class BoardReader:
    """A cache of the board kept by a daemon thread (see the module docstring)."""

    def __init__(self, url, max_age=60.0, refresh_interval=2.0, load_timeout=3.0,
                 board_opts=None, clock=time.time, opener=board_mod.open_board,
                 mode="follow", tau=20.0, hysteresis=0.3, on_change=None):
        if mode not in MODES:
            raise exceptions.ConfigError("board reader mode must be one of %s, got %r"
                                         % (", ".join(MODES), mode))
        self.url = url
        self.max_age = float(max_age)
        self.refresh_interval = float(refresh_interval)
        self.load_timeout = float(load_timeout)
        self.mode = mode
        self.tau = float(tau)
        self.hysteresis = float(hysteresis)
        self._board_opts = dict(board_opts or {})
        self._clock = clock
        self._opener = opener
        self._on_change = on_change
        self._entries = {}
        self._lock = threading.Lock()
        self._loaded_at = None
        self._loaded = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        self._start_lock = threading.Lock()
        self._board = None
        self._failing = False
        self._pruned_at = None
        self.applied = 0

    # -- lifecycle --------------------------------------------------------------
    def start(self):
        """Start the follower (idempotent) and wait for its first load, bounded."""
        with self._start_lock:
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name="resex-board-reader", daemon=True)
                self._thread.start()
        if not self._loaded.wait(self.load_timeout):
            LOG.warning("the price board %s gave no snapshot within %.1fs; "
                        "hosts are unknown until it does", board_mod.redact(self.url),
                        self.load_timeout)
        return self

    def stop(self, timeout=None):
        """Stop the follower and close the board."""
        with self._start_lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        board = self._board
        if board is not None and thread is not None:
            board.close()  # unblocks a watch stream
        if thread is not None:
            thread.join(timeout if timeout is not None else self.load_timeout + 5.0)
        if thread is None or not thread.is_alive():
            board, self._board = self._board, None
            if board is not None:
                board.close()

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    # -- the follower -----------------------------------------------------------------
    def _run(self):
        try:
            while not self._stop.is_set():
                if self.mode == "snapshot":
                    self.refresh()
                else:
                    self._follow()
                self._stop.wait(self.refresh_interval)
        finally:
            if self._board is not None:
                self._board.close()
                self._board = None

    def _follow(self):
        """Follow the board until it fails or the reader stops."""
        try:
            if self._board is None:
                self._board = self._opener(self.url, **self._board_opts)
            for full, records in self._board.follow(self._stop, self.refresh_interval):
                self._apply(full, records)
                self._recovered()
        except (exceptions.BoardUnavailable, exceptions.ConfigError) as exc:
            if self._stop.is_set():
                return
            self._failed(exc)
        except Exception:
            if self._stop.is_set():
                return
            LOG.exception("following the price board %s failed", board_mod.redact(self.url))
            self._loaded.set()

    def refresh(self):
        """Read the whole board now and merge it in; on failure keep the cache. True on success."""
        try:
            if self._board is None:
                self._board = self._opener(self.url, **self._board_opts)
            reports = self._board.snapshot()
        except (exceptions.BoardUnavailable, exceptions.ConfigError) as exc:
            self._failed(exc)
            return False
        except Exception:
            LOG.exception("reading the price board %s failed", board_mod.redact(self.url))
            self._loaded.set()
            return False
        self._apply(self.mode == "snapshot", reports)
        self._recovered()
        return True

    def _failed(self, exc):
        if not self._failing:
            LOG.warning("price board %s unavailable, serving the last snapshot "
                        "(%d hosts): %s", board_mod.redact(self.url), len(self._entries), exc)
            self._failing = True
        self._loaded.set()

    def _recovered(self):
        if self._failing:
            LOG.info("price board %s is back (%d hosts)", board_mod.redact(self.url),
                     len(self._entries))
            self._failing = False

    def _apply(self, full, records):
        """Merge ``{host: HostReport or None}``; ``full``: hosts not in it have no record."""
        tau, hysteresis, max_age = self.tau, self.hysteresis, self.max_age
        advance, start = admission_mod.advance, admission_mod.start
        with self._lock:
            entries = self._entries
            if full:
                for host in [h for h in entries if h not in records]:
                    del entries[host]
            for host, rec in records.items():
                if rec is None:
                    entries.pop(host, None)
                    continue
                old = entries.get(host)
                if old is None or rec.ts - old.report.ts > max_age:
                    entries[host] = Entry(rec, start(rec))
                elif rec.ts > old.report.ts:
                    # A blind epoch is no evidence: the admission state stays.
                    entries[host] = Entry(rec, old.admission if rec.blind else advance(
                        old.admission, rec, tau, hysteresis))
            self.applied += len(records)
            now = self._clock()
            if self._pruned_at is None or now - self._pruned_at >= max_age:
                self._pruned_at = now
                limit = now - 2.0 * max_age
                for host in [h for h, e in entries.items() if e.report.ts < limit]:
                    del entries[host]
        self._loaded_at = self._clock()
        self._loaded.set()
        if self._on_change is not None:
            self._on_change(records)

    # -- reading ------------------------------------------------------------------------
    def entry(self, host, now=None):
        """The :class:`Entry` of ``host`` if its report is fresh, else None."""
        e = self._entries.get(host)
        if e is None:
            return None
        if (self._clock() if now is None else now) - e.report.ts > self.max_age:
            return None
        return e

    def fresh(self, now=None):
        """``(entries, oldest)``: the live ``{host: Entry}`` cache and the oldest fresh ``ts``.

        For a loop over many hosts: an entry whose ``ts`` is below ``oldest``
        is stale. The dict is the reader's own, changed in place by the
        following thread: only look keys up in it (``get``), never iterate it
        or change it (use :meth:`snapshot` for a copy).
        """
        return self._entries, (self._clock() if now is None else now) - self.max_age

    def get(self, host, now=None):
        """The fresh report of ``host``, or None (unknown or older than ``max_age``)."""
        e = self.entry(host, now)
        return None if e is None else e.report

    def snapshot(self, now=None):
        """Every fresh report, ``{host: HostReport}`` (a new dict)."""
        limit = (self._clock() if now is None else now) - self.max_age
        with self._lock:
            items = list(self._entries.items())
        return {h: e.report for h, e in items if e.report.ts >= limit}

    @property
    def loaded_at(self):
        """Wall-clock time of the last successful read, or None."""
        return self._loaded_at

    @property
    def rejected(self):
        """Board records dropped since the board was opened: ``{"invalid": n, "misplaced": n}``.

        Each bad value counts once (:class:`~resex_libvirt.board.backend.RecordDecoder`).
        """
        board = self._board
        return board.rejected if board is not None else dict.fromkeys(backend.REASONS, 0)

    @property
    def failing(self):
        """True while the board is unreachable (the last snapshot is served)."""
        return self._failing


#: Settings that can change on a running shared reader (a nova.conf reload).
_TUNABLE = ("max_age", "refresh_interval", "load_timeout", "tau", "hysteresis")


def shared(url, **kwargs):
    """The process's started reader for ``url`` (created on first use).

    ``kwargs`` (max_age, refresh_interval, load_timeout, board_opts, mode,
    tau, hysteresis) apply when the reader is created; later calls with other
    values update the ages, intervals and admission settings in place (a
    nova.conf reload) but keep the thread.
    """
    with _READERS_LOCK:
        reader = _READERS.get(url)
        if reader is None:
            reader = _READERS[url] = BoardReader(url, **kwargs)
        else:
            for name in _TUNABLE:
                if name in kwargs and getattr(reader, name) != kwargs[name]:
                    setattr(reader, name, float(kwargs[name]))
    if not reader.running:
        reader.start()
    return reader


def stop_all():
    """Stop every shared reader (tests, service shutdown)."""
    with _READERS_LOCK:
        readers = list(_READERS.values())
        _READERS.clear()
    for reader in readers:
        reader.stop()
