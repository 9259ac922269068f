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

"""Whether the agent may publish under its host name: simulated hosts are marked.

The Nova filter matches board reports to compute nodes by name, and believes
them. A simulated host invents its VMs and their congestion, so a simulated
report under a real compute node's name would steer real placements. The
rule, applied at start (:func:`refuse_unmarked_simulation`) and shown by
``resex-agent --check``:

* the libvirt host publishes under any name (it reports what it measures);
* a simulated host publishes only under a name that starts with
  :data:`SIMULATED_PREFIX` (``sim-``, which no compute node is called) and
  that is not one of this machine's own names (host name, short name,
  FQDN), in case a machine is called ``sim-...``;
* without a board nothing is published, so any name goes.

The prefix is a mark rather than a guess: the agent cannot know every
compute node's name, but it can insist that a simulated name says so.
"""

import socket

from resex_libvirt import exceptions

#: Names of simulated hosts on a board start with this (case-insensitive).
SIMULATED_PREFIX = "sim-"


def machine_names():
    """This machine's names, lower-case: host name, its short form, the FQDN."""
    names = set()
    for name in (socket.gethostname(), socket.getfqdn()):
        name = (name or "").strip().lower()
        if name:
            names.add(name)
            names.add(name.split(".", 1)[0])
    return names


def is_marked_simulated(host):
    return str(host).lower().startswith(SIMULATED_PREFIX)


def publish_problem(host_driver, host, board_url, own_names=None):
    """Why ``host`` must not be published, or ``None`` when it may.

    ``own_names`` defaults to :func:`machine_names`.
    """
    if host_driver != "simulated" or not board_url:
        return None
    name = str(host).strip().lower()
    own = machine_names() if own_names is None else {n.lower() for n in own_names}
    suggestion = SIMULATED_PREFIX + (name.split(".", 1)[0] or "host")
    if name in own or name.split(".", 1)[0] in own:
        return ("[agent] host %r is this machine's name: a simulated host must not publish "
                "under it to the board %s (set [agent] host_driver = libvirt to report this "
                "node's real VMs, or [agent] host = %s... for a simulation)"
                % (host, board_url, SIMULATED_PREFIX))
    if not is_marked_simulated(name):
        return ("[agent] host %r does not start with %r: a simulated host publishes to the "
                "board %s only under a name marked simulated (e.g. %s), so that the Nova "
                "scheduler never takes it for a compute node"
                % (host, SIMULATED_PREFIX, board_url, suggestion))
    return None


def refuse_unmarked_simulation(host_driver, host, board_url, own_names=None):
    """``ConfigError`` when :func:`publish_problem` finds one."""
    problem = publish_problem(host_driver, host, board_url, own_names)
    if problem is not None:
        raise exceptions.ConfigError(problem)
