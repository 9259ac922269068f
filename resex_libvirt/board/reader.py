"""The scheduler's view of the board: one cached snapshot, refreshed in the background.

nova-scheduler calls the filter once per host and the weigher once per
request, from several native threads (Nova 34 runs no eventlet). Reading the
board on that path would cost a range read per request (210 ms at 10,000
hosts on etcd). So one :class:`BoardReader` per process and board URL
(:func:`shared`) holds the last snapshot as an immutable dict that a daemon
thread replaces every ``refresh_interval`` seconds; readers take the
reference without a lock (a Python reference assignment is atomic).

* **Freshness is judged at read time by the record's ``ts``** (wall clock),
  never by whether a key exists: a record older than ``max_age`` is not
  returned, even from the newest snapshot.
* **Outage**: a failed refresh keeps the last good snapshot (its records
  still age out one by one); the failure is logged once at WARNING, the
  recovery once at INFO.
* **First request not blind**: :meth:`BoardReader.start` waits for the first
  load up to ``load_timeout`` seconds.
"""

import logging
import threading
import time

from resex_libvirt import board as board_mod
from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

_READERS = {}
_READERS_LOCK = threading.Lock()


class BoardReader:
    """A board snapshot kept fresh by a daemon thread (see the module docstring)."""

    def __init__(self, url, max_age=60.0, refresh_interval=2.0, load_timeout=3.0,
                 board_opts=None, clock=time.time, opener=board_mod.open_board):
        self.url = url
        self.max_age = float(max_age)
        self.refresh_interval = float(refresh_interval)
        self.load_timeout = float(load_timeout)
        self._board_opts = dict(board_opts or {})
        self._clock = clock
        self._opener = opener
        self._reports = {}
        self._loaded_at = None
        self._loaded = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        self._start_lock = threading.Lock()
        self._board = None
        self._failing = False

    # -- lifecycle --------------------------------------------------------------
    def start(self):
        """Start the refresher (idempotent) and wait for its first load, bounded."""
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
        """Stop the refresher and close the board."""
        with self._start_lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout if timeout is not None else self.load_timeout + 5.0)
        if thread is None or not thread.is_alive():
            board, self._board = self._board, None
            if board is not None:
                board.close()

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    # -- the refresher --------------------------------------------------------------
    def _run(self):
        try:
            while not self._stop.is_set():
                self.refresh()
                self._stop.wait(self.refresh_interval)
        finally:
            if self._board is not None:
                self._board.close()
                self._board = None

    def refresh(self):
        """Read one snapshot now; on failure keep the last one. True on success."""
        try:
            if self._board is None:
                self._board = self._opener(self.url, **self._board_opts)
            reports = self._board.snapshot()
        except (exceptions.BoardUnavailable, exceptions.ConfigError) as exc:
            if not self._failing:
                LOG.warning("price board %s unavailable, serving the last snapshot "
                            "(%d hosts): %s", board_mod.redact(self.url),
                            len(self._reports), exc)
                self._failing = True
            self._loaded.set()
            return False
        except Exception:
            LOG.exception("reading the price board %s failed", board_mod.redact(self.url))
            self._loaded.set()
            return False
        if self._failing:
            LOG.info("price board %s is back (%d hosts)", board_mod.redact(self.url),
                     len(reports))
            self._failing = False
        self._reports = reports
        self._loaded_at = self._clock()
        self._loaded.set()
        return True

    # -- reading ------------------------------------------------------------------------
    def get(self, host, now=None):
        """The fresh report of ``host``, or None (unknown or older than ``max_age``)."""
        rec = self._reports.get(host)
        if rec is None:
            return None
        if (self._clock() if now is None else now) - rec.ts > self.max_age:
            return None
        return rec

    def snapshot(self, now=None):
        """Every fresh report, ``{host: HostReport}`` (a new dict)."""
        limit = (self._clock() if now is None else now) - self.max_age
        return {h: r for h, r in self._reports.items() if r.ts >= limit}

    @property
    def loaded_at(self):
        """Wall-clock time of the last successful refresh, or None."""
        return self._loaded_at

    @property
    def failing(self):
        """True while the board is unreachable (the last snapshot is served)."""
        return self._failing


def shared(url, **kwargs):
    """The process's started reader for ``url`` (created on first use).

    ``kwargs`` (max_age, refresh_interval, load_timeout, board_opts) apply
    when the reader is created; later calls with other values update the
    ages and intervals in place (a nova.conf reload) but keep the thread.
    """
    with _READERS_LOCK:
        reader = _READERS.get(url)
        if reader is None:
            reader = _READERS[url] = BoardReader(url, **kwargs)
        else:
            for name in ("max_age", "refresh_interval", "load_timeout"):
                if name in kwargs:
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
