"""``resex-agent``: the per-host daemon."""

import logging
import signal
import sys

from oslo_config import cfg
from oslo_log import log as oslo_log

from agent import conf as agent_conf
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


def format_table(rows):
    """The final per-VM table (plain text)."""
    head = ("VM", "SLA", "cap mean", "cap min", "CPU %", "tx MB/s", "lat us", "intf %")
    lines = ["%-22s %-4s %8s %8s %7s %9s %9s %7s" % head]
    for r in rows:
        lines.append("%-22s %-4s %8.1f %8s %7.1f %9.1f %9s %7s" % (
            r["vm"][:22], "yes" if r["sensitive"] else "-", r["cap_mean_pct"],
            "-" if r["cap_min_pct"] is None else "%.1f" % r["cap_min_pct"],
            r["cpu_mean_pct"], r["tx_mb_per_s"],
            "-" if r["latency_mean_us"] is None else "%.0f" % r["latency_mean_us"],
            "-" if r["interference_mean_pct"] is None else "%.1f" % r["interference_mean_pct"]))
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        conf = make_conf(argv)
    except cfg.Error as exc:
        print("resex-agent: %s" % exc, file=sys.stderr)
        return 2
    oslo_log.setup(conf, "resex-agent")
    if conf.check:
        from agent import check
        return check.run_check(conf, out=sys.stdout)
    try:
        agent = service.build_agent(conf)
    except (exceptions.ResexError, ValueError) as exc:
        LOG.error("cannot start: %s", exc)
        print("resex-agent: cannot start: %s" % exc, file=sys.stderr)
        return 1
    try:
        # Built here, not in build_agent: only the daemon binds the port.
        agent.metrics = metrics_mod.PrometheusMetrics.from_conf(conf)
    except exceptions.ConfigError as exc:
        LOG.error("cannot start: %s", exc)
        print("resex-agent: cannot start: %s" % exc, file=sys.stderr)
        agent.shutdown()
        return 1
    if agent.journal is not None:
        agent.journal.reconcile(agent.hypervisor)

    def _stop(signum, _frame):
        LOG.info("signal %d: stopping", signum)
        agent.stop()

    def _hup(_signum, _frame):
        agent.request_reload()

    agent.reloader = lambda: service.reload_market(conf, agent)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGHUP, _hup)
    try:
        agent.run()
    finally:
        agent.shutdown()
        if agent.metrics is not None:
            agent.metrics.close()
    if conf.agent.print_table:
        print()
        print("What the agent saw and did (%d epochs, policy %s):"
              % (agent.epochs, agent.market.policy.name))
        print(format_table(agent.table()))
        sim = agent.parts.sim
        if sim is not None:
            print()
            print(sim.format_results())
            print()
            print(compare_uncontrolled(sim))
    return 0


def compare_uncontrolled(sim):
    """The same simulated run without control, for contrast (the demo's last lines)."""
    from resex_libvirt.sim import report
    from resex_libvirt.sim import runner
    duration = sim.now() or sim.scenario.duration_s
    control_log = logging.getLogger("resex_libvirt.control")
    level = control_log.level
    control_log.setLevel(logging.WARNING)   # the contrast run's adoptions are not news
    try:
        base = runner.run(sim.scenario.with_realtime(0.0).with_duration(duration), "none")
    finally:
        control_log.setLevel(level)
    ours = sim.results()
    lines = ["Latency-sensitive VMs, with the agent vs the same run uncontrolled:"]
    for vm in sim.scenario.vms:
        if not vm.sla.sensitive:
            continue
        with_us = report.latency_stats(ours[vm.name]["latencies_us"])
        without = base.vm(vm.name)
        lines.append("  %s: mean %s us (uncontrolled %s us), p99 %s us (uncontrolled %s us), "
                     "SLA base %.0f us" % (
                         vm.name, report.fmt(with_us["mean_us"]),
                         report.fmt(without.latency_mean_us), report.fmt(with_us["p99_us"]),
                         report.fmt(without.latency_p99_us),
                         vm.sla.latency_sla_us))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
