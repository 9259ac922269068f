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

"""The policies ``resex-sim`` runs: the agent's plugins, the paper's variants and the peers.

The paper's Algorithms 1 and 2 exactly (:mod:`.paper_policies`) and the
peers (:mod:`.peers`) are research policies: the simulator's, never
installed as agent plugins.
"""

from resex_libvirt.market import policy as policy_mod
from resex_libvirt.sim import runner
from resex_research import paper_policies
from resex_research import peers

#: The paper's variants, by name.
RESEARCH = {cls.name: cls for cls in (paper_policies.FreeMarketPaper,
                                      paper_policies.IOSharesPaper)}


def names():
    """Every policy the simulator can run, sorted."""
    return sorted(set(peers.names()) | set(RESEARCH))


def factory(name):
    """The class of the plugin or paper variant ``name`` (UnknownPolicy listing :func:`names`)."""
    if name in RESEARCH:
        return RESEARCH[name]
    try:
        return policy_mod.factory(name)
    except policy_mod.UnknownPolicy:
        raise policy_mod.UnknownPolicy(name, names()) from None


def load(name, **kwargs):
    """The policy ``name`` made with ``kwargs``: a paper variant, a peer or a plugin."""
    if name in RESEARCH:
        return RESEARCH[name](**kwargs)
    if name in peers.NAMES:
        return peers.load(name, **kwargs)
    return factory(name)(**kwargs)


def run(scenario, name, model=None, series_every=None, **kwargs):
    """:func:`runner.run <resex_libvirt.sim.runner.run>` under the policy ``name`` (:func:`load`).

    The product's runner loads only the installed plugins by name; the paper's
    variants and the peers are made here and handed to it as objects.
    """
    return runner.run(scenario, load(name, **kwargs), model=model, series_every=series_every,
                      **kwargs)
