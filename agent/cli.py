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

import logging
import signal
import sys

from oslo_config import cfg
from oslo_log import log as oslo_log

from agent import conf as agent_conf
from agent import config_file
from agent import lock as agent_lock
from agent import metrics as metrics_mod
from agent import service
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
        from agent import check
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


def _start_step(what, fn, *args):
    """``fn(*args)``, or :class:`_StartFailed` with one line (the traceback at DEBUG)."""
    try:
        return fn(*args)
    except (exceptions.ResexError, ValueError, OSError, cfg.Error) as exc:
        raise _StartFailed(str(exc)) from exc
    except Exception as exc:
        LOG.debug("%s failed", what, exc_info=True)
        raise _StartFailed("%s: unexpected %s: %s" % (what, type(exc).__name__, exc)) from exc


def _run(conf):
    lock = None
    if conf.agent.host_driver == "libvirt":
        # First of all: a second agent must not touch the journal, the VMs or the socket.
        lock = _start_step("locking the state directory",
                           agent_lock.StateDirLock(conf.agent.state_dir).acquire)
        try:
            host_lock = _start_step("locking the host", agent_lock.HostLock(
                conf.libvirt.connection_uri, conf.agent.host_lock_path or None).acquire)
        except _StartFailed:
            lock.release()
            raise
        lock = _Both(lock, host_lock)
    agent = _start_step("building the agent", service.build_agent, conf)
    try:
        # Built here, not in build_agent: only the daemon binds the port.
        agent.metrics = _start_step("starting the metrics endpoint",
                                    metrics_mod.PrometheusMetrics.from_conf, conf)
        if agent.journal is not None:
            # First what operators set live (the restore must not undo it)...
            agent.hypervisor.adopt_operator_values(agent.journal.operator_values())
            _start_step("restoring the journal", agent.journal.reconcile, agent.hypervisor)
        for source in agent.latency_sources:
            start = getattr(source, "start", None)
            if start is not None:
                _start_step("starting the latency intake", start)
    except _StartFailed:
        agent.shutdown()
        if agent.metrics is not None:
            agent.metrics.close()
        if lock is not None:
            lock.release()
        raise
    agent.reloader = lambda: service.reload_market(conf, agent)
    try:
        serve(agent)
    finally:
        if lock is not None:
            lock.release()
    if conf.agent.print_table:
        from resex_libvirt.sim import demo
        print()
        print(demo.closing_report(agent.table(), agent.epochs, agent.market.policy.name,
                                  sim=agent.parts.sim))
    return EXIT_OK


class _Both:
    """Two locks released together."""

    def __init__(self, *locks):
        self.locks = locks

    def release(self):
        for lock in reversed(self.locks):
            lock.release()


def serve(agent):
    """Run ``agent`` until SIGTERM/SIGINT (or its end), then restore and close, bounded.

    The first SIGTERM or SIGINT asks the loop to stop; the loop's longest
    wait is one hypervisor call's watchdog bound, and the restore that
    follows is bounded by ``shutdown_timeout_s`` (:meth:`agent.loop.Agent.shutdown`).
    SIGHUP asks for ``agent.reloader`` before the next interval.
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
    try:
        agent.run()
    finally:
        agent.shutdown()
        if agent.metrics is not None:
            agent.metrics.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
