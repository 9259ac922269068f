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

"""What operators would run instead of ResEx, as policies of the simulator.

Each peer is written from its project's documented algorithm and defaults
(the module docstrings cite the files and documents read, and state every
simplification) and adapted to the market's policy interface, at its
documented cadence:

* ``koordinator_suppress`` (:mod:`.koordinator`): Koordinator's koordlet
  BE CPU suppress, every 1 s;
* ``crane_throttle`` (:mod:`.crane`): Crane's NodeQOS watermark and
  throttle action, every 10 s;
* ``ewma_step`` (:mod:`.ewma_step`): a Caelus-style EWMA latency detector
  stepping the best-effort VMs' caps, every 1 s.

They are yardsticks for ``resex-sim compare --peers``, not production
policies: they are not in the ``resex.policies`` entry points, so no agent
on a compute node loads them. :func:`load` gives a peer by name and any
installed policy otherwise, which is how the simulator selects them.
"""

from resex_libvirt.market import policy as policy_mod


def _classes():
    from resex_research.peers import crane
    from resex_research.peers import ewma_step
    from resex_research.peers import koordinator
    return {c.name: c for c in (koordinator.KoordinatorSuppress, crane.CraneThrottle,
                                ewma_step.EWMAStep)}


#: The peers' names, in the order the comparison shows them.
NAMES = ("koordinator_suppress", "crane_throttle", "ewma_step")


def names():
    """Every policy the simulator can run: the installed ones and the peers."""
    return sorted(set(policy_mod.names()) | set(NAMES))


def load(name, **kwargs):
    """The peer ``name`` with ``kwargs``, or the installed policy of that name."""
    cls = _classes().get(name)
    if cls is None:
        return policy_mod.load(name, **kwargs)
    return cls(**kwargs)
