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

"""FreeMarket: maximise resource utilisation (paper Section VI-B, Algorithm 1).

Every VM pays a fixed price and may spend its allocation as it likes; a VM
whose Resos run low late in the epoch loses 10% of its cap each interval
(:mod:`.credit`), and a VM whose own latency is over its SLA is never cut.
Algorithm 1 exactly, without that rule, is the simulator's
``free_market_paper``. See ``doc/source/market.rst``.
"""

from resex_libvirt.market import credit
from resex_libvirt.market import policy


class FreeMarket(policy.Policy):
    """Algorithm 1, sparing a VM whose own latency is over its SLA (:func:`credit.spared`)."""

    name = "free_market"
    columns = credit.COLUMNS
    options = credit.OPTIONS

    def __init__(self, **options):
        self.opts = policy.configure(self.options, options)

    def decide(self, step):
        answer = policy.Answer()
        credit.answer(answer, step, credit.spared(step, self.opts, answer))
        return answer

    def start_epoch(self, step):
        return credit.reset(step)
