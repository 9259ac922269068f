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

"""The closing tables of an agent run, and the demo's contrast with an uncontrolled run.

``resex-agent`` with ``[agent] print_table`` prints :func:`closing_report`
when it stops: the per-VM table of what the market did (any host driver),
and on the simulated host (``make demo``) the simulated latencies and the
same scenario re-run for as long without control (policy ``none``), so the
last lines show what the agent changed for each latency-sensitive VM.
"""

import logging

from resex_libvirt.sim import run_output
from resex_libvirt.sim import runner


def format_table(rows):
    """The per-VM table of what the market did (rows of ``Controller.table``)."""
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


def compare_uncontrolled(sim):
    """The same simulated run without control, for contrast (the demo's last lines).

    ``sim`` is the :class:`~resex_libvirt.sim.host.SimHost` the agent ran on;
    the contrast run replays its scenario for the simulated time it ran,
    unpaced, with the fast runner.
    """
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
        with_us = run_output.latency_stats(ours[vm.name]["latencies_us"])
        without = base.vm(vm.name)
        lines.append("  %s: mean %s us (uncontrolled %s us), p99 %s us (uncontrolled %s us), "
                     "SLA base %.0f us" % (
                         vm.name, run_output.fmt(with_us["mean_us"]),
                         run_output.fmt(without.latency_mean_us),
                         run_output.fmt(with_us["p99_us"]),
                         run_output.fmt(without.latency_p99_us),
                         vm.sla.latency_sla_us))
    return "\n".join(lines)


def closing_report(rows, epochs, policy, sim=None):
    """What ``resex-agent`` prints on exit with ``[agent] print_table``.

    ``rows`` are the agent's per-VM summaries, ``epochs`` how many it ran,
    ``policy`` the policy's name; ``sim`` the simulated host, if the agent
    ran on one (then the simulated results and the contrast follow).
    """
    parts = ["What the agent saw and did (%d epochs, policy %s):" % (epochs, policy),
             format_table(rows)]
    if sim is not None:
        parts += ["", sim.format_results(), "", compare_uncontrolled(sim)]
    return "\n".join(parts)
