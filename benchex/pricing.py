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

"""Black-Scholes option pricing: BenchEx's per-request work (paper Section IV).

"Our server uses a financial processing algorithm library for request
processing to perform operations such as Black Scholes Options Pricing."
:func:`work` prices European options for a configured compute time, so a
request's service time is set by the operator, not by the library's speed.
"""

import math
import time

_SQRT2 = math.sqrt(2.0)


def norm_cdf(x):
    return 0.5 * (1.0 + math.erf(x / _SQRT2))


def black_scholes(spot, strike, rate, vol, years):
    """``(call, put)`` prices of a European option (Black and Scholes, 1973)."""
    if spot <= 0 or strike <= 0 or vol <= 0 or years <= 0:
        raise ValueError("spot, strike, vol and years must be > 0")
    sqrt_t = math.sqrt(years)
    d1 = (math.log(spot / strike) + (rate + 0.5 * vol * vol) * years) / (vol * sqrt_t)
    d2 = d1 - vol * sqrt_t
    discount = strike * math.exp(-rate * years)
    call = spot * norm_cdf(d1) - discount * norm_cdf(d2)
    put = discount * norm_cdf(-d2) - spot * norm_cdf(-d1)
    return call, put


def work(compute_us, seed=0):
    """Price options for ``compute_us`` us (at least one); return ``(count, checksum)``."""
    deadline = time.perf_counter_ns() + int(compute_us * 1000)
    count = 0
    checksum = 0.0
    while True:
        k = seed + count
        call, put = black_scholes(100.0 + (k % 17), 95.0 + (k % 13), 0.01 + (k % 5) * 0.005,
                                  0.2 + (k % 7) * 0.05, 0.25 + (k % 4) * 0.25)
        checksum += call - put
        count += 1
        if time.perf_counter_ns() >= deadline:
            return count, checksum
