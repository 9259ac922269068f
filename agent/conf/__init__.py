"""The agent's configuration: one module per option group.

``register_opts(conf)`` registers every group on a ``cfg.ConfigOpts``;
``list_opts()`` feeds ``oslo-config-generator`` (entry point
``oslo.config.opts: resex.agent``) and the docs.
"""

from agent.conf import agent
from agent.conf import board
from agent.conf import fabric
from agent.conf import hypervisor
from agent.conf import latency
from agent.conf import market
from agent.conf import metrics
from agent.conf import nova
from agent.conf import sim

_MODULES = (agent, market, hypervisor, nova, fabric, latency, board, metrics, sim)


def register_opts(conf):
    for module in _MODULES:
        module.register_opts(conf)


def list_opts():
    out = []
    for module in _MODULES:
        out.extend(module.list_opts())
    return out
