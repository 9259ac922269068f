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

Related options:

* ``[market_<policy>]``: each policy's own tunables (the credit rule's
  ``low_balance``, ``epoch_left``, ``step``; ``io_shares``' ``heavier``
  and both production policies' settling law, ``target``,
  ``loop_delay_s``, ``gain``, ...), declared by the policy plugin itself. The paper's
  Algorithms 1 and 2 exactly as published (``free_market_paper``,
  ``io_shares_paper``) are research policies of ``resex-sim``, not
  plugins of the agent.
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
    cfg.IntOpt("pcpus", default=0, min=0, mutable=True,
               help="Physical CPUs whose time the VMs share (CPU supply); 0: as the host "
                    "reports."),
]


def register_opts(conf):
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return [(GROUP, OPTS)]
