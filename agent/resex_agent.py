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

"""``resex-agent``: the per-host daemon."""

import faulthandler
import logging
import signal
import sys

from oslo_config import cfg
from oslo_log import log as oslo_log

from resex_agent import builder
from resex_agent import conf as agent_conf
from resex_agent import config_file
from resex_agent import lock as agent_lock
from resex_agent import loop
import resex_libvirt
from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)


CLI_OPTS = [
    cfg.BoolOpt("check", default=False,
                help="Validate the configuration, reach the hypervisor and the price "
                     "board, list the VMs that would be controlled with their SLAs and "
                     "knobs, and exit (non-zero on any problem)."),
]


def make_conf(argv):
    conf = cfg.ConfigOpts()
    oslo_log.register_options(conf)
    conf.register_cli_opts(CLI_OPTS)
    agent_conf.register_opts(conf)
    conf(argv, project="resex", prog="resex-agent", version=resex_libvirt.version())
    return conf


#: Exit codes, as the other OpenStack agents (nova-compute, the neutron agents,
#: oslo.service launchers) use them: 0 after a clean stop, 1 when the agent
#: cannot start or fails, 2 for a command line or configuration file that
#: cannot be parsed (argparse's usage error).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def _fail(message):
    """One line on stderr and in the log, no traceback: the start failure's whole story."""
    LOG.error("cannot start: %s", message)
    print("resex-agent: cannot start: %s" % message, file=sys.stderr)
    return EXIT_FAILURE


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        conf = make_conf(argv)
    except cfg.Error as exc:
        print("resex-agent: %s" % exc, file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:      # e.g. a --config-file that is a directory
        print("resex-agent: cannot read the configuration: %s" % exc, file=sys.stderr)
        return EXIT_USAGE
    try:
        oslo_log.setup(conf, "resex-agent")
    except Exception as exc:
        print("resex-agent: cannot set up logging: %s" % exc, file=sys.stderr)
        return EXIT_FAILURE
    if not conf.check:
        # --check fails on them; the daemon names them and starts.
        for problem in config_file.unknown(conf):
            LOG.warning("%s: ignored (the default applies)", problem)
    if conf.check:
        from resex_agent import check
        return check.run_check(conf, out=sys.stdout)
    try:
        return _run(conf)
    except _StartFailed as exc:
        message = exc.message
    # Outside the except block: oslo.log would append the exception to the line.
    return _fail(message)


class _StartFailed(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


def _start_failed(what, exc):
    """``exc`` as :class:`_StartFailed`: one line (an unexpected error's traceback at DEBUG)."""
    if isinstance(exc, (exceptions.ResexError, ValueError, OSError, cfg.Error)):
        return _StartFailed(str(exc))
    LOG.debug("%s failed", what, exc_info=exc)
    return _StartFailed("%s: unexpected %s: %s" % (what, type(exc).__name__, exc))


def _start_step(what, fn, *args):
    """``fn(*args)``, or :class:`_StartFailed` with one line."""
    try:
        return fn(*args)
    except Exception as exc:
        raise _start_failed(what, exc) from exc


def _run(conf):
    lock = _lock(conf)
    try:
        parts, agent = _build(conf)
        serve(agent)
    finally:
        if lock is not None:
            lock.release()
    if conf.agent.print_table:
        from resex_libvirt.sim import demo
        print()
        print(demo.closing_report(agent.table(), agent.epochs, agent.market.policy.name,
                                  sim=parts.sim))
    return EXIT_OK


def _lock(conf):
    """On libvirt, the state directory's and the host's locks, held together; else ``None``."""
    if conf.agent.host_driver != "libvirt":
        return None
    # First of all: a second agent must not touch the journal, the VMs or the socket.
    lock = _start_step("locking the state directory",
                       agent_lock.StateDirLock(conf.agent.state_dir).acquire)
    try:
        host_lock = _start_step("locking the host", agent_lock.HostLock(
            conf.libvirt.connection_uri, conf.agent.host_lock_path or None).acquire)
    except _StartFailed:
        lock.release()
        raise
    return _Both(lock, host_lock)


def _build(conf):
    """The parts and the agent that owns them (closed by the builder if it cannot be built)."""
    parts = _start_step("building the agent", builder.build_parts, conf)
    return parts, _start_step("building the agent", builder.build_agent, conf, parts)


class _Both:
    """Two locks released together."""

    def __init__(self, *locks):
        self.locks = locks

    def release(self):
        for lock in reversed(self.locks):
            lock.release()


#: The signal that makes a running agent write every thread's stack (``kill -USR1 PID``).
DUMP_SIGNAL = signal.SIGUSR1


def _fd_of(stream):
    """``stream``'s file descriptor, or the process's standard error (2) when it has none."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def serve(agent, dump_file=None):
    """Start ``agent``, run it until SIGTERM/SIGINT (or its end), then restore and close, bounded.

    A part that cannot start (:class:`resex_agent.loop.StartFailed`) is
    :class:`_StartFailed`, with the agent already shut down. The first
    SIGTERM or SIGINT asks the loop to stop; the loop's longest wait is one
    hypervisor call's watchdog bound, and the restore that follows is
    bounded by ``shutdown_timeout_s`` (:meth:`resex_agent.loop.Agent.shutdown`).
    SIGHUP asks for ``agent.reloader`` before the next interval.
    :data:`DUMP_SIGNAL` writes the stack of every thread to ``dump_file``
    (default stderr, the journal under systemd) through :mod:`faulthandler`,
    which needs no Python code to run: it answers even when the loop is
    stuck in a call that holds the interpreter.
    """
    def _stop(signum, _frame):
        if agent.stopping:
            return
        LOG.info("signal %d: stopping (restoring the VMs' knobs within %.0f s)",
                 signum, agent.shutdown_timeout_s)
        agent.stop()

    def _hup(_signum, _frame):
        agent.request_reload()

    previous = {sig: signal.signal(sig, handler) for sig, handler in (
        (signal.SIGTERM, _stop), (signal.SIGINT, _stop), (signal.SIGHUP, _hup))}
    faulthandler.register(DUMP_SIGNAL, file=_fd_of(dump_file or sys.stderr), all_threads=True)
    try:
        try:
            agent.start()
        except loop.StartFailed as exc:
            raise _start_failed(exc.step, exc.cause) from exc
        agent.run()
    finally:
        agent.shutdown()
        faulthandler.unregister(DUMP_SIGNAL)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
