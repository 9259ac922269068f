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

"""The Reso market (paper Sections V-C and VI): pure, no I/O, no clock.

``Market`` owns the ledger and a policy; the agent loop and the simulator
feed it one interval at a time and apply what it decides.
"""

from resex_libvirt.market import market as _market
from resex_libvirt.market import records as _records

EpochSummary = _market.EpochSummary
Market = _market.Market
MarketParams = _market.MarketParams
Decision = _records.Decision
LatencyWindow = _records.LatencyWindow
Sample = _records.Sample
VMSpec = _records.VMSpec
