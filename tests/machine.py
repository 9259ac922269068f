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

"""What every test of real parts on this machine shares (the lab, the cloud, the faults).

* :class:`LabLock` - the machine-wide lock (``/tmp/resex-lab.lock``) held by
  whatever runs the system libvirtd, guests or a cloud: one lab at a time.
* :func:`stop_pid` - a process stopped by PID, and only the process that was
  started (:func:`start_time` tells a reused PID apart).
* :func:`wait_for` - the one poll until a condition holds.
"""

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import time

LOG = logging.getLogger(__name__)

#: Held (flock) by whatever starts the system libvirtd, guests or a cloud.
LOCK_PATH = os.environ.get("RESEX_LAB_LOCK", "/tmp/resex-lab.lock")


class LockTimeout(RuntimeError):
    """The lab lock was still held by another lab when the wait ran out."""


# -- waiting -----------------------------------------------------------------------

def wait_for(predicate, timeout, step=0.02, what=None):
    """``predicate()``'s first true value within ``timeout`` s.

    If none comes: its last value, or with ``what`` an ``AssertionError``
    naming what did not happen. An exception from ``predicate`` ends the
    wait (a process it watches died, say).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            break
        time.sleep(step)
    if not value and what is not None:
        raise AssertionError("%s: not within %.0f s" % (what, timeout))
    return value


def seconds_until(predicate, timeout, step=0.01):
    """Seconds until ``predicate()`` is true (``inf`` if not within ``timeout``)."""
    started = time.monotonic()
    if wait_for(predicate, timeout, step):
        return time.monotonic() - started
    return float("inf")


# -- processes by PID ------------------------------------------------------------

def start_time(pid):
    """The start time of ``pid`` in clock ticks since boot, or None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


def alive(pid, started=None):
    """``pid`` runs (not a zombie) and, if ``started`` is given, is the process started then."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def stop_pid(pid, started=None, timeout=10.0):
    """SIGTERM ``pid``, SIGKILL after ``timeout`` s; True if it was running.

    With ``started`` (its :func:`start_time`) a PID reused by another
    process is never signalled. A process that leads its own process group
    (started with ``start_new_session``) is signalled with its group
    (gunicorn's workers, RabbitMQ's beam under its start script), and what
    is left of the group once the leader is gone is killed. Our child is
    reaped.
    """
    if pid is None:
        return False
    if not alive(pid, started):
        _reap(pid)
        return False
    group = _is_group_leader(pid)
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            break
        if wait_for(lambda: _reap(pid) or not alive(pid, started), wait, step=0.05):
            break
    _reap(pid)
    if group:
        for member in group_members(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)
        # A process killed is gone a moment later, not at once.
        wait_for(lambda: not group_members(pid), 5.0, step=0.02)
    return True


def _is_group_leader(pid):
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def group_members(pgid):
    """PIDs of the live processes in process group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


def _comm(pid):
    """The command name of ``pid`` (``/proc/PID/comm``), or None if it is gone."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def _reap(pid):
    """Collect ``pid`` if it is our child and has exited (never blocks)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


# -- the lab lock ------------------------------------------------------------------

class LabLock:
    """The machine-wide lab lock: ``flock(path)``, exclusive.

    Re-entrant within one object (a nested :meth:`acquire` counts), released
    when the count falls to zero or when the process dies (the kernel drops
    an flock with its file). :meth:`hand_over` gives the held lock to a
    ``sleep`` child instead, which holds it for as long as it lives: a cloud
    that outlives the command that started it.
    """

    def __init__(self, path=None):
        self.path = path or LOCK_PATH
        self._fd = None
        self._depth = 0

    def acquire(self, timeout=None):
        """Take the lock, queued behind the lab's other users (at most ``timeout`` s)."""
        if self._depth == 0:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            started = time.monotonic()
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    # Blocking, so that the kernel queues us with the lab's
                    # other users instead of letting them overtake a poller.
                    LOG.warning("waiting for the lab lock %s (another lab runs)", self.path)
                    self._flock(fd, timeout)
                    LOG.info("lab lock taken after %.1f s", time.monotonic() - started)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        self._depth += 1
        return self

    def _flock(self, fd, timeout):
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return

        def expired(signum, frame):
            raise LockTimeout("%s still held after %.0f s" % (self.path, timeout))
        previous = signal.signal(signal.SIGALRM, expired)
        signal.alarm(max(1, int(timeout)))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)

    def release(self):
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._close()

    def hand_over(self, log, with_caller=False):
        """Give the held lock to a ``sleep`` child; ``(its Popen, its argv)``.

        The child holds the lock until it is stopped. With ``with_caller`` it
        dies with the thread that started it (``setpriv --pdeathsig``,
        prctl(2) ``PR_SET_PDEATHSIG``, kept over exec): a test runner killed
        mid-run must not leave the machine's lab locked. This object no
        longer holds anything.
        """
        if self._depth == 0:
            raise RuntimeError("hand_over: the lab lock %s is not held" % self.path)
        argv = (["setpriv", "--pdeathsig", "KILL"] if with_caller else []) \
            + ["sleep", "infinity"]
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, pass_fds=(self._fd,), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self._close()       # not LOCK_UN: the child shares the lock's open file
        # setpriv sets the death signal and then runs sleep: a caller gone
        # before that would leave the lock held for ever.
        wait_for(lambda: _comm(proc.pid) in ("sleep", None), 10.0, step=0.01)
        return proc, argv

    def _close(self):
        os.close(self._fd)
        self._fd = None
        self._depth = 0

    @property
    def held(self):
        return self._depth > 0

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
