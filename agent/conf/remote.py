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

"""Options of acting on other hosts' remote claims: group ``[remote_claims]``.

Off by default: a host then only publishes the claims of its own victims
(report 1.5) and never acts on another host's (doc/source/fabric.rst,
"Acting on remote claims").
"""

from oslo_config import cfg

GROUP = "remote_claims"

OPTS = [
    cfg.BoolOpt(
        "enabled",
        default=False,
        help="""
Act on the remote claims other hosts publish on this host's VMs.

A latency-sensitive VM on another host whose peer (the server it measures)
runs here is then judged as a victim of this host's port: this host's
market taxes its own senders for it, as for a local victim, while this
port's measured load supports the claim. Needs ``[board] url``: the claims
are read from the board, by a thread of their own.

Related options:

* ``[board] url``
* ``max_age``
"""),
    cfg.FloatOpt(
        "max_age",
        default=10.0,
        min=1.0,
        max=600.0,
        help="""
Seconds after which a remote claim whose host stopped publishing expires.

Judged when the claims are read, every interval: a claim whose report is
older moves no cap, and the VM it named is released by the market's usual
rules. Keep it a few epochs above the claiming hosts' epoch (a host with
remote claims publishes every epoch), and well below nova.conf ``[resex]
max_age``.
"""),
    cfg.StrOpt(
        "topology_file",
        default="",
        help="""
The shared links this host sends into (a rack's uplink, a spine): the file
nova.conf ``[resex] topology_file`` reads (doc/source/scheduler.rst,
"Shared links").

Empty: no shared link (the default). With it, a remote claim whose requests
cross a link this host is behind, while the link's load (from its hosts'
reports) supports it, scales the CPU limit of this host's heavy I/O VMs
down to this host's part of the link (PARDA's rule over every host behind
it, weighted by their heavy VMs), and back up when the victim is under its
target or no claim crosses the link (doc/source/fabric.rst, "Shared links
in the market"). A VM with a latency SLA of its own, or one whose tenant
did not consent to caps, is never limited. Read at start; a file that
cannot be read or parsed stops the agent, naming it.

Related options:

* ``enabled``
* ``link_delay``
"""),
    cfg.FloatOpt(
        "link_delay",
        default=3.0,
        min=0.5,
        max=600.0,
        help="""
Seconds between two changes of a shared link's limit: the loop's delay
(the victim's host's report period plus a window of its requests).

A shorter delay acts again before the last change shows in the victim's
window, and the limit swings; a longer one protects later. Only with
``topology_file``.
"""),
]


def register_opts(conf):
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return [(GROUP, OPTS)]
