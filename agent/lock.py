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

"""One agent per host: an exclusive ``flock(2)`` on the state directory.

Two agents sharing a state directory would fight over every VM's knobs: the
second would take the live journal for an unclean stop, restore every cap
under the running agent, take over its probe socket and, on exit, write an
empty journal. :class:`StateDirLock` is therefore the first thing the agent
takes, before it reads the journal, opens the hypervisor or binds a socket.

A second agent with another state directory would fight the same way, so
the agent also takes :class:`HostLock`, one per hypervisor (beside
libvirtd's runtime files for ``qemu:///system``).

Each lock is ``flock(LOCK_EX | LOCK_NB)`` on its file (``<state_dir>/agent.lock``). The
kernel releases it when the process exits, however it exits (``kill -9``
included), so a stale lock file never blocks a restart. The holder writes
its PID into the file so that a second agent can name it.
"""

import errno
import fcntl
import hashlib
import os
import tempfile
import urllib.parse

from resex_libvirt import exceptions

LOCK_NAME = "agent.lock"


class AlreadyRunning(exceptions.ResexError):
    """Another agent holds the lock (of the state directory, or of the host)."""

    def __init__(self, path, pid, what="state directory"):
        self.path = path
        self.pid = pid
        holder = "pid %d" % pid if pid else "a process whose PID is not recorded"
        super().__init__("another resex-agent (%s) holds %s; one agent per host and state "
                         "directory (this lock is the %s's)" % (holder, path, what))


class _LockFile:
    """``flock(LOCK_EX | LOCK_NB)`` on one file, holding our PID."""

    what = "state directory"

    def __init__(self, path):
        self.path = path
        self._fd = None

    def _open(self):
        directory = os.path.dirname(self.path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def acquire(self):
        """Take the lock and record our PID; raises :class:`AlreadyRunning` or ``ConfigError``."""
        try:
            fd = self._open()
        except OSError as exc:
            raise exceptions.ConfigError(self._config_error(exc)) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise AlreadyRunning(self.path, pid, self.what) from None
            raise exceptions.ConfigError("cannot lock %s: %s" % (self.path, exc)) from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"%d\n" % os.getpid(), 0)
        self._fd = fd
        return self

    def _config_error(self, exc):
        return "cannot open the lock %s: %s" % (self.path, exc)

    @property
    def held(self):
        return self._fd is not None

    def release(self):
        """Drop the lock (the kernel does it anyway at exit)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


class StateDirLock(_LockFile):
    """The exclusive lock of one state directory; :meth:`acquire` or raise."""

    def __init__(self, state_dir):
        self.state_dir = os.path.abspath(state_dir)
        super().__init__(os.path.join(self.state_dir, LOCK_NAME))

    def _config_error(self, exc):
        return "[agent] state_dir %s: %s" % (self.state_dir, exc)


#: Where the host lock of a ``...:///system`` URI lives: beside libvirtd's own
#: runtime files, so that it is per host even where each compute node of a
#: test cloud has its own private ``/run/libvirt`` (a mount namespace).
LIBVIRT_RUN_DIR = "/run/libvirt"
HOST_LOCK_NAME = "resex-agent.lock"


def host_lock_path(uri, run_dir=LIBVIRT_RUN_DIR):
    """The host lock's path for the hypervisor at ``uri``.

    ``<scheme>:///system`` (QEMU, Xen): ``/run/libvirt/resex-agent.lock``
    whatever the scheme, one agent per libvirtd. Any other URI (the test
    driver, a session daemon, a daemon on another socket such as
    ``qemu+unix:///system?socket=...``): a file named by the URI's hash in
    the system's temporary directory.
    """
    parsed = urllib.parse.urlsplit(uri or "")
    if parsed.path.rstrip("/") == "/system" and not parsed.netloc and not parsed.query:
        return os.path.join(run_dir, HOST_LOCK_NAME)
    digest = hashlib.sha256((uri or "").encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), "resex-agent-%s.lock" % digest)


class HostLock(_LockFile):
    """One agent per hypervisor, whatever its state directory (see :func:`host_lock_path`)."""

    what = "host"

    def __init__(self, uri, path=None):
        self.uri = uri
        super().__init__(path or host_lock_path(uri))


#: The kernel's table of the locks held, one per line (proc(5)).
PROC_LOCKS = "/proc/locks"


def holder(path, proc_locks=PROC_LOCKS):
    """The PID of the process holding ``path``'s ``flock``, or ``None`` when free or absent.

    Read from the kernel's lock table, taking no lock: ``resex-agent
    --check`` asks it beside a running agent, which must never find its
    lock taken, even for an instant. ``0`` when the lock is held but the
    holder's PID is not visible (another PID namespace).
    """
    try:
        st = os.stat(path)
        with open(proc_locks) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    where = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:9978183 0 EOF"; a waiter has "->".
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == where:
                return max(0, int(fields[4]))
        except ValueError:
            continue
    return None


def _read_pid(fd):
    try:
        raw = os.pread(fd, 32, 0)
        return int(raw.split()[0]) if raw.strip() else 0
    except (OSError, ValueError, IndexError):
        return 0
