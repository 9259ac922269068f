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

"""The knob journal: every VM's original scheduler parameters, safe on disk.

doc/source/operations.rst, "When something fails": before the agent first changes a
VM's knobs it records their original values; on SIGTERM/SIGINT it writes
them all back and exits; started after a crash it reconciles from the journal
before controlling anything. The file is JSON::

    {"version": 1, "originals": {"<uuid>": {"global_quota": -1, ...}},
     "operator": {"<uuid>": {"dom_id": 7, "values": {"cpu_shares": 5000}}}}

``operator`` (optional) keeps the knob values operators set live on a
running domain: they are that VM's originals and the agent leaves those
knobs alone. It outlives a clean stop (the live values are the operator's
then) and ends when the domain restarts or stops.

Every write is atomic and durable (POSIX ``rename(2)`` atomicity): a
temporary file in the same directory, ``fsync``, ``rename`` over the
journal, ``fsync`` of the directory so the rename itself survives a power
cut. A journal that cannot be read or parsed is never silently dropped: it
raises :class:`JournalCorrupt` naming the file and how to recover safely.

A write that fails (a full or read-only state directory) loses nothing and
stops nothing: the originals are kept in memory (so a clean stop restores
them all), the failure is one error line at most every
:data:`WRITE_ERROR_LOG_S` seconds and a counter (``write_errors``), the VMs
not yet on disk are listed in ``unsaved``, and every later change and every
epoch (:meth:`Journal.flush`) retries the write. The agent goes on
controlling those VMs: leaving an interferer uncapped because the disk is
full would hurt its neighbours for as long as the disk stays full, while
the only risk of capping it is a crash *before* the write succeeds, after
which the next start would not know that VM's originals.
"""

import json
import logging
import os
import tempfile
import threading
import time

from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

VERSION = 1

#: At most one error line per this many seconds while the journal cannot be written.
WRITE_ERROR_LOG_S = 60.0

_RECOVER = ("Recover safely: stop the agent, check each VM's scheduler parameters against "
            "its persistent definition (virsh schedinfo --config DOMAIN) and, where they "
            "differ, write the persistent ones back (virsh schedinfo --live DOMAIN "
            "vcpu_quota=... global_quota=... cpu_shares=...); then remove %s and start "
            "the agent")


class JournalCorrupt(exceptions.ConfigError):
    """The journal file exists but cannot be read as a journal."""


class Journal:
    """Original knobs of the VMs the agent changed, persisted at ``path``."""

    def __init__(self, path, clock=time.monotonic):
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._clock = clock
        self._originals, self._operator = self._load()
        self._on_disk = set(self._originals)
        self._dirty = False
        self.write_errors = 0
        self._error_logged_at = None

    @property
    def unsaved(self):
        """UUIDs whose originals are in memory but not (yet) on disk."""
        with self._lock:
            return set(self._originals) - self._on_disk

    def _save(self, originals):
        """Write ``originals``; on failure count, log (throttled) and return False. Lock held."""
        try:
            self._write(originals)
        except OSError as exc:
            self._dirty = True
            self.write_errors += 1
            now = self._clock()
            if self._error_logged_at is None or now - self._error_logged_at >= WRITE_ERROR_LOG_S:
                self._error_logged_at = now
                LOG.error("cannot write the knob journal %s: %s; %d VM(s)' originals are held "
                          "in memory only (restored on a clean stop, lost on a crash) and the "
                          "write is retried every epoch (%d failed writes so far)",
                          self.path, exc, len(set(originals) - self._on_disk),
                          self.write_errors)
            return False
        if self._error_logged_at is not None:
            LOG.info("knob journal %s written again after %d failed write(s)",
                     self.path, self.write_errors)
            self._error_logged_at = None
        self._on_disk = set(originals)
        self._dirty = False
        return True

    def flush(self):
        """Retry writing when something is held in memory only; True when on disk."""
        with self._lock:
            if set(self._originals) == self._on_disk and not self._dirty:
                return True
            return self._save(self._originals)

    def _load(self):
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return {}, {}
        except OSError as exc:
            raise JournalCorrupt("cannot read knob journal %s: %s. %s"
                                 % (self.path, exc, _RECOVER % self.path)) from exc
        if not raw.strip():
            # A zero-length file is what a crash between create and write leaves
            # when the journal was never written atomically: treat as corrupt.
            raise JournalCorrupt("knob journal %s is empty; expected JSON version %d. %s"
                                 % (self.path, VERSION, _RECOVER % self.path))
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise JournalCorrupt("knob journal %s is not valid JSON: %s. %s"
                                 % (self.path, exc, _RECOVER % self.path)) from exc
        originals = data.get("originals") if isinstance(data, dict) else None
        if (not isinstance(data, dict) or data.get("version") != VERSION
                or not isinstance(originals, dict)
                or not all(isinstance(k, str) and isinstance(v, dict)
                           for k, v in originals.items())):
            raise JournalCorrupt("knob journal %s is not a version %d journal "
                                 "({\"version\": 1, \"originals\": {uuid: {...}}}). %s"
                                 % (self.path, VERSION, _RECOVER % self.path))
        operator = data.get("operator", {})
        if not isinstance(operator, dict) or not all(
                isinstance(k, str) and isinstance(v, dict)
                and isinstance(v.get("values"), dict) for k, v in operator.items()):
            raise JournalCorrupt("knob journal %s: \"operator\" is not {uuid: {\"dom_id\": "
                                 "..., \"values\": {...}}}. %s"
                                 % (self.path, _RECOVER % self.path))
        return originals, operator

    def _write(self, originals):
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(self.path), dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                data = {"version": VERSION, "originals": originals}
                if self._operator:
                    data["operator"] = self._operator
                json.dump(data, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def remember(self, uuid, params):
        """Record ``params`` as ``uuid``'s originals unless already recorded.

        Returns True if this call recorded them (and the file was written).
        """
        with self._lock:
            if uuid in self._originals:
                return False
            originals = dict(self._originals)
            originals[uuid] = dict(params)
            self._originals = originals
            self._save(originals)
            return True

    def __contains__(self, uuid):
        """True once ``uuid``'s originals are recorded.

        No I/O: lets the loop skip reading the knobs before every change.
        """
        with self._lock:
            return uuid in self._originals

    def originals(self):
        """``{uuid: params}`` recorded so far (a copy)."""
        with self._lock:
            return {k: dict(v) for k, v in self._originals.items()}

    def update(self, uuid, params):
        """Replace ``uuid``'s originals if recorded; True if they changed.

        The VM was redefined or restarted, or an operator changed a knob.
        """
        with self._lock:
            if uuid not in self._originals or self._originals[uuid] == dict(params):
                return False
            originals = dict(self._originals)
            originals[uuid] = dict(params)
            self._originals = originals
            self._save(originals)
            LOG.info("journal: originals of VM %s now %s", uuid, params)
            return True

    def forget(self, uuid):
        """Drop ``uuid``'s record (the VM stopped or was undefined: nothing live to restore)."""
        with self._lock:
            if uuid not in self._originals and uuid not in self._operator:
                return
            originals = dict(self._originals)
            originals.pop(uuid, None)
            self._originals = originals
            if uuid in self._operator:
                self._operator = {k: v for k, v in self._operator.items() if k != uuid}
            self._save(originals)

    def operator_values(self):
        """``{uuid: {"dom_id": int, "values": {...}}}`` operators set live (a copy)."""
        with self._lock:
            return {k: {"dom_id": v.get("dom_id", -1), "values": dict(v["values"])}
                    for k, v in self._operator.items()}

    def set_operator(self, uuid, values, dom_id):
        """Keep (or with ``{}`` drop) the live values an operator set on ``uuid``."""
        with self._lock:
            record = {"dom_id": int(dom_id), "values": dict(values)} if values else None
            if self._operator.get(uuid) == record:
                return
            operator = {k: v for k, v in self._operator.items() if k != uuid}
            if record is not None:
                operator[uuid] = record
            self._operator = operator
            self._save(self._originals)

    def restore_all(self, hypervisor, report=True):
        """Write every original back through ``hypervisor.restore_knobs``, then clear.

        A VM that is gone is dropped (debug log). A VM that fails for another
        reason keeps its record (and is logged, unless ``report`` is false:
        the caller tries again) so that a later start can try again; returns
        ``{uuid: error}`` for those.
        """
        failed = {}
        for uuid, params in self.originals().items():
            try:
                hypervisor.restore_knobs(uuid, params)
            except exceptions.VMGone:
                LOG.debug("VM %s is gone: nothing to restore", uuid)
            except exceptions.ResexError as exc:
                if report:
                    LOG.error("cannot restore the knobs of VM %s: %s", uuid, exc)
                failed[uuid] = exc
        with self._lock:
            remaining = {k: v for k, v in self._originals.items() if k in failed}
            self._originals = remaining
            self._save(remaining)
        if not failed:
            LOG.info("restored original knobs from %s", self.path)
        return failed

    def reconcile(self, hypervisor):
        """What a start after a crash does before controlling: :meth:`restore_all`."""
        pending = self.originals()
        if not pending:
            return {}       # a clean stop left nothing: nothing to write
        LOG.warning("journal %s holds knobs of %d VM(s) from an unclean stop; restoring",
                    self.path, len(pending))
        return self.restore_all(hypervisor)
