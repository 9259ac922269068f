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

"""Options of the Reso market: group ``[market]``. All mutable (SIGHUP)."""

from oslo_config import cfg

GROUP = "market"

OPTS = [
    cfg.StrOpt(
        "policy",
        default="io_shares",
        mutable=True,
        help="""
The pricing policy (paper Section VI): the name of a plugin in the
``resex.policies`` entry point group. The agent checks it against the
policies installed when it starts (and on SIGHUP) and refuses, listing
them, a name that is not installed; ``resex-agent --check`` does the same.

Possible values (the policies this package installs; another distribution
can add its own):

* ``none``: no control, every VM runs at its limit (the uncontrolled case).
* ``free_market``: FreeMarket, paper Algorithm 1: fixed prices, gradual cap
  decrease when a VM's Resos run low; never cuts a VM whose own latency is
  over its SLA.
* ``io_shares``: IOShares, paper Algorithm 2: every VM that interferes with
  a latency-sensitive VM is taxed in proportion to its I/O share; a VM
  with an SLA is never taxed while its own latency is over it; the tax
  alone sets the cap (no credit floor on top).
* ``latency_target``: a PARDA-style controller that steers the interferers'
  caps to the largest that keeps the sensitive VMs' latency just inside
  their SLA, in bounded steps.
* ``free_market_paper``, ``io_shares_paper``: Algorithms 1 and 2 exactly
  as published (for comparison with the paper).

Related options:

* ``low_balance``, ``epoch_left``, ``step`` (the FreeMarket credit rule:
  every policy but ``none``; ``io_shares`` and ``latency_target`` apply it
  only with their ``use_balance`` parameter, off by default)
* ``decay_half_life`` (``io_shares``, ``io_shares_paper``), ``heavier``
  (``io_shares``)
"""),
    cfg.FloatOpt("cpu_price", default=1.0, min=0.0, mutable=True,
                 help="Resos per CPU percent per interval (paper VI-A: 1)."),
    cfg.FloatOpt("io_price", default=1.0, min=0.0, mutable=True,
                 help="Resos per MTU sent (paper VI-A: 1)."),
    cfg.FloatOpt("min_cap_pct", default=1.0, min=0.1, max=100.0, mutable=True,
                 help="""
Lowest cap the market ever sets, percent of one pCPU, unless a VM's
reservation is higher (a Xen cap of 0 means uncapped, so 0 is not a cap).
"""),
    cfg.FloatOpt("low_balance", default=0.10, min=0.0, max=0.99, mutable=True,
                 help="FreeMarket: a VM with less than this fraction of its Resos left "
                      "starts losing CPU (paper: 10%)."),
    cfg.FloatOpt("epoch_left", default=0.10, min=0.0, max=0.99, mutable=True,
                 help="FreeMarket: ...but only while more than this fraction of the epoch "
                      "is left (paper: 10%)."),
    cfg.FloatOpt("step", default=0.10, min=0.0, max=0.99, mutable=True,
                 help="FreeMarket: the cap falls by this fraction of its previous value "
                      "each interval (paper: 10%)."),
    cfg.FloatOpt("decay_half_life", default=0.05, min=0.001, max=100.0, mutable=True,
                 help="IOShares: half-life, in epochs, of a tax once interference is gone."),
    cfg.FloatOpt("heavier", default=1.1, min=1.0, max=1000.0, mutable=True,
                 help="IOShares: an interferer must send at least this many times the "
                      "victim's own MTU rate (equal senders are not taxed, paper Fig. 8). "
                      "For io_shares only: io_shares_paper keeps its own 1.5."),
    cfg.IntOpt("pcpus", default=0, min=0, mutable=True,
               help="Physical CPUs whose time the VMs share (CPU supply); 0: as the host "
                    "reports."),
]


def register_opts(conf):
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return [(GROUP, OPTS)]


def policy_kwargs(conf):
    """Constructor arguments of the configured policy, from ``[market]``."""
    grp = conf[GROUP]
    if grp.policy == "none":
        return {}
    kwargs = {"low_balance": grp.low_balance, "epoch_left": grp.epoch_left, "step": grp.step}
    if grp.policy == "io_shares":
        kwargs.update(decay_half_life=grp.decay_half_life, heavier=grp.heavier)
    elif grp.policy == "io_shares_paper":
        kwargs.update(decay_half_life=grp.decay_half_life)
    return kwargs
