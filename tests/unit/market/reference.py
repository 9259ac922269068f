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

"""Reference implementations of the market's latency rules, one VM at a time.

The market applies them to every reporting VM at once, on columns
(``Market._take_windows``); property tests hold the two to the same
answers. Test code only.
"""

from resex_libvirt.market import latency


def interference_pct(window, base_mean_us, base_std_us=None):
    """Interference percentage of ``window`` over the base; never negative."""
    if window is None or window.count == 0 or base_mean_us <= 0:
        return 0.0
    mean_inc = 100.0 * (window.mean_us - base_mean_us) / base_mean_us
    std_inc = 0.0
    if base_std_us is not None:
        std_inc = 100.0 * (window.std_us - base_std_us) / base_mean_us
    return max(0.0, mean_inc, std_inc)


#: How far a calm window's deviation pulls the learned one up (a fraction of the gap).


class BaselineTracker:
    """A VM's base latency standard deviation, learned from calm windows.

    A window is calm when its mean is within the VM's threshold of the base
    mean. The estimate drops at once to a lower calm value and rises by
    ``rise`` of the gap otherwise, so a burst of noise moves it little.

    This is the rule's reference, one VM at a time; the market applies it to
    every reporting VM at once (``Market._take_windows``), and a property
    test holds the two to the same answers.
    """

    def __init__(self, rise=latency.DEFAULT_RISE):
        self.rise = rise
        self.std_us = None

    def observe(self, window, base_mean_us, threshold_pct):
        if window is None or window.count < 2:
            return self.std_us
        if 100.0 * (window.mean_us - base_mean_us) / base_mean_us > threshold_pct:
            return self.std_us
        if self.std_us is None or window.std_us < self.std_us:
            self.std_us = window.std_us
        else:
            self.std_us += self.rise * (window.std_us - self.std_us)
        return self.std_us
