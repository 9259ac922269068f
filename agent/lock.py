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

The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``<state_dir>/agent.lock``. The
kernel releases it when the process exits, however it exits (``kill -9``
included), so a stale lock file never blocks a restart. The holder writes
its PID into the file so that a second agent can name it.
"""

import errno
import fcntl
import os

from resex_libvirt import exceptions

LOCK_NAME = "agent.lock"


class AlreadyRunning(exceptions.ResexError):
    """Another agent holds the state directory's lock."""

    def __init__(self, path, pid):
        self.path = path
        self.pid = pid
        holder = "pid %d" % pid if pid else "a process whose PID is not recorded"
        super().__init__("another resex-agent (%s) holds %s; one agent per host and state "
                         "directory" % (holder, path))


class StateDirLock:
    """The exclusive lock of one state directory; :meth:`acquire` or raise."""

    def __init__(self, state_dir):
        self.state_dir = os.path.abspath(state_dir)
        self.path = os.path.join(self.state_dir, LOCK_NAME)
        self._fd = None

    def acquire(self):
        """Take the lock and record our PID; raises :class:`AlreadyRunning` or ``ConfigError``."""
        try:
            os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise exceptions.ConfigError("[agent] state_dir %s: %s" % (self.state_dir, exc)) \
                from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise AlreadyRunning(self.path, pid) from None
            raise exceptions.ConfigError("cannot lock %s: %s" % (self.path, exc)) from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"%d\n" % os.getpid(), 0)
        self._fd = fd
        return self

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


def _read_pid(fd):
    try:
        raw = os.pread(fd, 32, 0)
        return int(raw.split()[0]) if raw.strip() else 0
    except (OSError, ValueError, IndexError):
        return 0
