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

"""Options of the agent's control loop: group ``[agent]``."""

import socket

from oslo_config import cfg

GROUP = "agent"

OPTS = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<hostname>",
        help="""
Name under which this host publishes its reports on the price board.

Must equal the compute node's name in Nova (``nova-compute``'s ``host``),
since the Nova filter matches reports to hosts by it. A simulated host
(``host_driver = simulated``) that publishes to a board needs a name
starting with ``sim-`` (never this machine's): no compute node is called
that, so the scheduler never takes simulated congestion for a real host's.

Related options:

* ``host_driver``, ``[board] url``
"""),
    cfg.StrOpt(
        "host_driver",
        default="libvirt",
        choices=[
            ("libvirt", "The VMs of the libvirt daemon at ``[libvirt] connection_uri`` "
                        "(the default)."),
            ("simulated", "The simulated ResEx testbed of ``[sim] scenario`` (demo, "
                          "experiments, tests: changes nothing real). It publishes to a "
                          "board only under a host name that starts with ``sim-``."),
        ],
        help="""
Which host the agent controls.

The default is the real one: a configuration that forgets this line
controls and reports this compute node's VMs, never made-up ones. The
simulated host invents its VMs and their congestion: to keep the Nova
scheduler from believing it, the agent refuses to start when it would
publish a simulated host to a board under a name that is not marked
simulated (``host`` must start with ``sim-`` and must not be this
machine's name). Without a board (``[board] url`` empty) any name goes.

Possible values:

* ``libvirt``: the real VMs of this compute node (default)
* ``simulated``: the paper's testbed, simulated (demo, experiments, tests)

Related options:

* ``host``, ``[board] url``, ``[sim] scenario``, ``[libvirt] connection_uri``
"""),
    cfg.FloatOpt(
        "interval",
        min=0.0005,
        max=10.0,
        help="""
Control interval in seconds: sample, charge, decide and actuate every interval.

Unset: 0.1 s on libvirt (a libvirt knob write costs 2-3 ms), the scenario's
interval (1 ms, as in the paper) on the simulated host.

Related options:

* ``epoch``
"""),
    cfg.FloatOpt(
        "epoch",
        min=0.001,
        max=3600.0,
        help="""
Epoch in seconds: Reso balances are replenished, a summary line is logged
and a host report published every epoch. Must be a whole number of
intervals. Unset: 1 s on libvirt, the scenario's epoch on the simulated host.

Related options:

* ``interval``
"""),
    cfg.FloatOpt(
        "deadband_pct",
        default=1.0,
        min=0.0,
        max=100.0,
        mutable=True,
        help="""
A knob is written only when the cap changed by at least this many percentage
points (of one pCPU) since the last write, or moved to or from uncapped. A
libvirt scheduler write costs milliseconds and emits an event.
"""),
    cfg.StrOpt(
        "cap_consent",
        default="opted_in",
        choices=[
            ("opted_in", "The default: only the VMs that opted in are capped below their "
                         "limit (``resex:io_class=bulk``, or a project or flavor of "
                         "``consent_projects`` / ``consent_flavors``); every other VM is "
                         "measured, charged and published, and keeps its limit."),
            ("all", "Every VM may be capped down to its reservation "
                    "(``resex:cpu_reservation_pct``, default 0) or ``[market] "
                    "min_cap_pct``: the paper's market."),
        ],
        help="""
Who may be capped below the limit of its flavor (or of its metadata).

``opted_in`` gives every VM that did not opt in a reservation equal to its
limit in the market's copy of its SLA, so the market never caps it; its
traffic counts as load the host's market cannot tax in the report the
scheduler reads. A VM opts in by its own SLA (``resex:io_class=bulk`` in its
flavor or metadata) or by the operator's rule (``consent_projects``,
``consent_flavors``). A latency-sensitive VM (``resex:latency_sla_us``)
never opts in.

Possible values:

* ``opted_in``: only VMs that opted in (default)
* ``all``: every VM (the paper's market)

Related options:

* ``consent_projects``, ``consent_flavors``: the operator's opt-in
* ``observe_only``: the first step of a rollout, before any cap
"""),
    cfg.ListOpt(
        "consent_projects",
        default=[],
        help="""
Keystone project IDs whose VMs count as opted in under ``cap_consent =
opted_in``, as if their flavor said ``resex:io_class=bulk`` (for consent
only: the scheduler still reads the flavor's own ``resex:io_class``). The
project is the one Nova writes in the domain (``<nova:owner><nova:project
uuid=...>``), so a VM Nova did not define never matches. A
latency-sensitive VM (``resex:latency_sla_us``) of a listed project is
never capped below its limit.

Possible values:

* A comma-separated list of project IDs (``openstack project show -f value
  -c id NAME``); case and dashes are ignored. Empty (the default): no
  project opts in on its tenants' behalf

Related options:

* ``cap_consent``, ``consent_flavors``
"""),
    cfg.ListOpt(
        "consent_flavors",
        default=[],
        help="""
Nova flavor names whose VMs count as opted in under ``cap_consent =
opted_in``, as if the flavor said ``resex:io_class=bulk`` (for consent
only). The name is the one Nova writes in the domain (``<nova:flavor
name=...>``); a VM resized to another flavor follows its new one. A
latency-sensitive VM (``resex:latency_sla_us``) of a listed flavor is
never capped below its limit.

Possible values:

* A comma-separated list of flavor names (exact, case-sensitive). Empty
  (the default): no flavor opts in beyond its own ``resex:io_class``

Related options:

* ``cap_consent``, ``consent_projects``
"""),
    cfg.BoolOpt(
        "observe_only",
        default=False,
        help="""
Run the whole market (VMs measured, caps decided, host reports published,
metrics served) and log each cap it would write, at INFO when the cap
changes (``observe-only: VM web-1 (...) would get cap 16.0%, weight 256
(not written)``), without writing a knob or the journal. A journal left by
an earlier run that wrote caps is still restored at start.

Related options:

* ``cap_consent``
"""),
    cfg.StrOpt(
        "state_dir",
        default="/var/lib/resex",
        help="""
Directory of the agent's state: the knob journal (``journal.json``) that
restores every VM's original scheduler parameters after a crash, and the
lock (``agent.lock``) that keeps a second agent from starting on it.
"""),
    cfg.StrOpt(
        "host_lock_path",
        default="",
        help="""
The lock that keeps a second agent off this host, whatever its
``state_dir``. Empty (the default): ``/run/libvirt/resex-agent.lock`` for a
``...:///system`` libvirt URI (beside libvirtd's own runtime files, so one
per libvirtd), else a file named by the URI in the temporary directory.

Related options:

* ``state_dir`` (its own lock keeps a second agent off the journal)
"""),
    cfg.FloatOpt(
        "hypervisor_call_timeout",
        default=2.0,
        min=0.05,
        max=60.0,
        help="""
Longest wait, in seconds, for one libvirt call made by the control loop. A
call that overruns it (libvirtd hung or busy) is abandoned: the hypervisor is
marked unavailable, every VM keeps the knobs last written, further calls fail
at once until the abandoned call returns, and the loop keeps its deadlines.

Possible values:

* 0.05 to 60 seconds; above the slowest healthy call (a domain listing takes
  1-2 s while a VM is being destroyed)

Related options:

* ``shutdown_timeout``
"""),
    cfg.FloatOpt(
        "shutdown_timeout",
        default=10.0,
        min=0.0,
        max=600.0,
        help="""
Longest time, in seconds, SIGTERM spends restoring the VMs' original knobs.
What is not restored by then (libvirtd hung, thousands of VMs) stays in the
knob journal and is restored by the next start before it controls anything.

Possible values:

* 0 to 600 seconds; each call is also bounded by ``hypervisor_call_timeout``

Related options:

* ``hypervisor_call_timeout``, ``state_dir``
"""),
    cfg.IntOpt(
        "max_epochs",
        default=0,
        min=0,
        help="""
Stop after this many epochs (0: run until SIGTERM, or until the simulated
scenario ends).
"""),
    cfg.BoolOpt(
        "print_table",
        default=False,
        help="""
On exit, print a per-VM table of what the market did (the demo sets it).
"""),
]


def register_opts(conf):
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return [(GROUP, OPTS)]
