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

"""The agent's configuration: one module per option group.

``register_opts(conf)`` registers every group on a ``cfg.ConfigOpts``;
``list_opts()`` feeds ``oslo-config-generator`` (entry point
``oslo.config.opts: resex.agent``) and the docs.
"""

from resex_agent.conf import agent
from resex_agent.conf import board
from resex_agent.conf import fabric
from resex_agent.conf import hypervisor
from resex_agent.conf import latency
from resex_agent.conf import market
from resex_agent.conf import metrics
from resex_agent.conf import nova
from resex_agent.conf import policies
from resex_agent.conf import remote
from resex_agent.conf import sim

_MODULES = (agent, market, policies, hypervisor, nova, fabric, latency, board, remote, metrics,
            sim)


def register_opts(conf):
    for module in _MODULES:
        module.register_opts(conf)


def list_opts():
    out = []
    for module in _MODULES:
        out.extend(module.list_opts())
    return out
