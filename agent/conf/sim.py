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

"""Options of the simulated host: group ``[sim]``."""

from oslo_config import cfg

GROUP = "sim"

OPTS = [
    cfg.StrOpt(
        "scenario",
        default="paper_64k_vs_2m",
        help="""
Scenario the simulated host runs: a packaged scenario name (``resex-sim
list`` shows them) or the path of a TOML scenario file.

Related options:

* ``[agent] host_driver`` (must be ``simulated``)
"""),
    cfg.FloatOpt(
        "realtime",
        min=0.0,
        help="""
Pace the simulation against the wall clock: 1.0 runs one simulated second
per second, 0 as fast as possible. Unset: the scenario's own setting.
"""),
]


def register_opts(conf):
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return [(GROUP, OPTS)]
