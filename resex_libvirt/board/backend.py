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

"""The price board's interface: publish one host's report, read everyone's.

Two implementations, chosen by URL scheme in :func:`resex_libvirt.board.open_board`:
:mod:`~resex_libvirt.board.sqlite` (one file, the all-in-one default) and
:mod:`~resex_libvirt.board.etcd` (etcd v3, for a fleet). Every error of the
store underneath becomes :class:`~resex_libvirt.exceptions.BoardUnavailable`
with the cause chained. Records are untrusted (any compute node can write
one): a record that does not validate, or that names another host than its
key, is dropped by :class:`RecordDecoder` (counted in :attr:`Board.rejected`,
logged), never returned and never raised: one bad agent must not blind the
scheduler to the rest of the fleet (:doc:`/board`, "Untrusted records").
Freshness is the reader's business (by ``ts``): a board returns what it holds.
"""

import abc
import collections
import logging

from resex_libvirt.board import report as report_mod

LOG = logging.getLogger(__name__)


class Board(metaclass=abc.ABCMeta):
    """A store of one :class:`~resex_libvirt.board.report.HostReport` per host."""

    #: The URL the board was opened with (credentials never included).
    url = None

    #: The backend's :class:`RecordDecoder` (every backend decodes through one).
    _decoder = None

    @property
    def rejected(self):
        """Records dropped since the board was opened: ``{reason: count}`` of :data:`REASONS`."""
        counts = self._decoder.rejected if self._decoder is not None else {}
        return {reason: counts.get(reason, 0) for reason in REASONS}

    @abc.abstractmethod
    def publish(self, report):
        """Store ``report`` as its host's current record (replacing the previous one)."""

    @abc.abstractmethod
    def snapshot(self):
        """Every valid record the board holds, as ``{host: HostReport}``."""

    def follow(self, stop, interval):
        """Yield the board's changes as ``(full, {host: HostReport or None})`` batches.

        The first batch is ``full`` (every valid record: a host missing from
        it has none); later batches hold only hosts whose record changed
        (``None``: removed or no longer valid). Runs until ``stop`` (a
        ``threading.Event``) is set; raises ``BoardUnavailable`` when the
        store fails, after which the caller starts a new ``follow`` (a full
        re-read). This default re-reads the whole board every ``interval``
        seconds; the backends override it with something cheaper (SQLite:
        rows changed since the last read; etcd: a watch).
        """
        while not stop.is_set():
            yield True, self.snapshot()
            stop.wait(interval)

    @abc.abstractmethod
    def count(self):
        """How many hosts have a record (valid or not): the fleet's size."""

    @abc.abstractmethod
    def close(self):
        """Release connections; the board must not be used afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


#: Why a record was dropped: it failed validation / it names another host than its key.
INVALID, MISPLACED = "invalid", "misplaced"
REASONS = (INVALID, MISPLACED)


class RecordDecoder:
    """Turns a backend's ``(host, raw)`` rows into ``{host: HostReport}``.

    ``raw`` is the stored value (bytes or text; anything else is invalid),
    ``host`` the host its key names. The parsed record of each host is kept
    and reused while its raw value is unchanged: in a large fleet agents
    publish on change, so most records of a snapshot are the ones of the
    previous snapshot and validation costs a comparison.

    A row is dropped, never raised, when its record does not validate
    (:data:`INVALID`) or names another host than its key (:data:`MISPLACED`:
    a copy-paste or a forged write must not shadow a real host; a key that
    is not text, or held bytes that are not UTF-8, names no host). Each
    dropped value is counted once in :attr:`rejected` (an unchanged one read
    again is not), and logged at WARNING when the key's record turns bad
    (at DEBUG while it stays bad, so a broken agent publishing every second
    logs one line, not one an epoch).
    """

    def __init__(self, source):
        self.source = source
        self._last = {}
        self.rejected = collections.Counter()

    def decode(self, rows):
        out = {}
        seen = {}
        last = self._last
        for host, raw in rows:
            hit = last.get(host)
            if hit is not None and hit[0] == raw:
                rec = hit[1]
            else:
                rec = self._parse(host, raw, hit)
            seen[host] = (raw, rec)
            if rec is not None:
                out[host] = rec
        self._last = seen
        return out

    def decode_changes(self, rows):
        """``{host: HostReport or None}`` for changed ``(host, raw)`` rows (raw None: removed)."""
        out = {}
        last = self._last
        for host, raw in rows:
            if raw is None:
                last.pop(host, None)
                out[host] = None
                continue
            hit = last.get(host)
            rec = hit[1] if hit is not None and hit[0] == raw else self._parse(host, raw, hit)
            last[host] = (raw, rec)
            out[host] = rec
        return out

    def _parse(self, host, raw, hit):
        """The record of ``raw`` under ``host``'s key, or None; ``hit``: the key's last row."""
        try:
            rec = report_mod.HostReport.from_json(raw)
        except report_mod.InvalidReport as exc:
            return self._drop(host, hit, INVALID, exc)
        except Exception:  # noqa: BLE001 - the boundary: a bad record never blinds the reader
            LOG.exception("unexpected error validating the board record under %.80r from %s",
                          host, self.source)
            return self._drop(host, hit, INVALID, "unexpected error (logged above)")
        if type(host) is not str or rec.host != host or "\ufffd" in host:
            return self._drop(host, hit, MISPLACED, "it names host %r" % (rec.host,))
        return rec

    def _drop(self, host, hit, reason, detail):
        self.rejected[reason] += 1
        # Warn when the key's record turns bad; its next bad values are DEBUG.
        level = logging.DEBUG if hit is not None and hit[1] is None else logging.WARNING
        # A key is any bytes a node chose: logged as a repr, at most 80 characters.
        LOG.log(level, "dropping the board record under %.80r from %s (%s): %s",
                host, self.source, reason, detail)
        return None
