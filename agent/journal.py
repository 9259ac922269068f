"""The knob journal: every VM's original scheduler parameters, safe on disk.

DESIGN.md, "Bad input, faults, safety": before the agent first changes a
VM's knobs it records their original values; on SIGTERM/SIGINT it writes
them all back and exits; started after a crash it reconciles from the journal
before controlling anything. The file is JSON::

    {"version": 1, "originals": {"<uuid>": {"global_quota": -1, ...}}}

Every write is atomic and durable (POSIX ``rename(2)`` atomicity): a
temporary file in the same directory, ``fsync``, ``rename`` over the
journal, ``fsync`` of the directory so the rename itself survives a power
cut. A journal that cannot be read or parsed is never silently dropped: it
raises :class:`JournalCorrupt` naming the file, and the operator decides.
"""

import json
import logging
import os
import tempfile
import threading

from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

VERSION = 1


class JournalCorrupt(exceptions.ConfigError):
    """The journal file exists but cannot be read as a journal."""


class Journal:
    """Original knobs of the VMs the agent changed, persisted at ``path``."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._originals = self._load()

    def _load(self):
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise JournalCorrupt("cannot read knob journal %s: %s" % (self.path, exc)) from exc
        if not raw.strip():
            # A zero-length file is what a crash between create and write leaves
            # when the journal was never written atomically: treat as corrupt.
            raise JournalCorrupt("knob journal %s is empty; expected JSON version %d "
                                 "(move it away after checking the VMs' knobs)"
                                 % (self.path, VERSION))
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise JournalCorrupt("knob journal %s is not valid JSON: %s" % (self.path, exc)) \
                from exc
        originals = data.get("originals") if isinstance(data, dict) else None
        if (not isinstance(data, dict) or data.get("version") != VERSION
                or not isinstance(originals, dict)
                or not all(isinstance(k, str) and isinstance(v, dict)
                           for k, v in originals.items())):
            raise JournalCorrupt("knob journal %s is not a version %d journal "
                                 "({\"version\": 1, \"originals\": {uuid: {...}}})"
                                 % (self.path, VERSION))
        return originals

    def _write(self, originals):
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(self.path), dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"version": VERSION, "originals": originals}, f, sort_keys=True)
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
            self._write(originals)
            self._originals = originals
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

    def forget(self, uuid):
        """Drop ``uuid``'s record (e.g. once its knobs are back to the originals)."""
        with self._lock:
            if uuid not in self._originals:
                return
            originals = dict(self._originals)
            del originals[uuid]
            self._write(originals)
            self._originals = originals

    def restore_all(self, hypervisor):
        """Write every original back through ``hypervisor.restore_knobs``, then clear.

        A VM that is gone is dropped (debug log). A VM that fails for another
        reason keeps its record (and is logged) so that a later start can try
        again; returns ``{uuid: error}`` for those.
        """
        failed = {}
        for uuid, params in self.originals().items():
            try:
                hypervisor.restore_knobs(uuid, params)
            except exceptions.VMGone:
                LOG.debug("VM %s is gone: nothing to restore", uuid)
            except exceptions.ResexError as exc:
                LOG.error("cannot restore the knobs of VM %s: %s", uuid, exc)
                failed[uuid] = exc
        with self._lock:
            remaining = {k: v for k, v in self._originals.items() if k in failed}
            self._write(remaining)
            self._originals = remaining
        if not failed:
            LOG.info("restored original knobs from %s", self.path)
        return failed

    def reconcile(self, hypervisor):
        """What a start after a crash does before controlling: :meth:`restore_all`."""
        pending = self.originals()
        if pending:
            LOG.warning("journal %s holds knobs of %d VM(s) from an unclean stop; restoring",
                        self.path, len(pending))
        return self.restore_all(hypervisor)
