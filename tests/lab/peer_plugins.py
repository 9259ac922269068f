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

"""The peers as the lab's agent loads them: the node's capacity is the host's CPUs.

The simulator's peers (:mod:`resex_research.peers`) take the node's
capacity as the sum of the VMs' sizes (one pCPU per vCPU, the paper's
testbed). Koordinator's koordlet and Crane's agent read the node's own
capacity, so on the lab's host (its guests share its few pCPUs: three
one-vCPU guests on two cores in the verbs lab) these classes give them that:
``100 x`` the host's online CPUs. Everything else is the simulator's peer,
unchanged. ``ewma_step`` reads no capacity and is installed as it is.

Research plugins of the lab only (:func:`tests.lab.experiment.research_install`
copies this file beside their entry points, so it imports nothing from ``tests``),
never production entry points.
"""

import os

from resex_research.peers import crane
from resex_research.peers import koordinator


def host_capacity_pct():
    """The host's CPUs in percent of one CPU (the CPUs this process may run on)."""
    return 100.0 * len(os.sched_getaffinity(0))


class KoordinatorSuppress(koordinator.KoordinatorSuppress):
    """``koordinator_suppress`` with the host's capacity."""

    def __init__(self, **kwargs):
        kwargs.setdefault("capacity_pct", host_capacity_pct())
        super().__init__(**kwargs)


class CraneThrottle(crane.CraneThrottle):
    """``crane_throttle`` with the host's capacity."""

    def __init__(self, **kwargs):
        kwargs.setdefault("capacity_pct", host_capacity_pct())
        super().__init__(**kwargs)
