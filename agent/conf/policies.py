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

"""Each pricing policy's own options: group ``[market_<policy>]``. All mutable (SIGHUP).

A policy plugin declares its tunables (``Policy.options``); this module
makes them oslo.config options, for every policy installed in the
``resex.policies`` entry point group, so that ``oslo-config-generator``
lists a third-party policy's group exactly as a built-in one's.
"""

from oslo_config import cfg

from resex_libvirt.market import policy as policy_mod

PREFIX = "market_"

_CREDIT = ("low_balance", "epoch_left", "step")
#: The tunables each built-in policy read from ``[market]`` before it had a
#: group of its own: still read there (deprecated) when its group lacks them.
_FROM_MARKET = {"free_market": _CREDIT, "latency_target": _CREDIT,
                "io_shares": _CREDIT + ("heavier",)}

_TYPES = ((bool, cfg.BoolOpt), (int, cfg.IntOpt), (float, cfg.FloatOpt))


def group_of(name):
    """The option group of the policy ``name``."""
    return PREFIX + name


def _opt(policy_name, option):
    kind = next((make for typ, make in _TYPES if isinstance(option.default, typ)), cfg.StrOpt)
    kwargs = {}
    if kind in (cfg.IntOpt, cfg.FloatOpt):
        kwargs = {"min": option.min, "max": option.max}
    deprecated = ([cfg.DeprecatedOpt(option.name, group="market")]
                  if option.name in _FROM_MARKET.get(policy_name, ()) else None)
    return kind(option.name, default=option.default, mutable=True, help=option.help,
                deprecated_opts=deprecated, **kwargs)


def opts_of(name, factory):
    """The oslo.config options of the policy ``name`` made by ``factory``."""
    return [_opt(name, o) for o in policy_mod.options_of(factory)]


def _installed():
    """``(name, factory)`` of every installed policy that loads."""
    out = []
    for name in policy_mod.names():
        try:
            out.append((name, policy_mod.factory(name)))
        except (policy_mod.UnknownPolicy, policy_mod.PolicyLoadError):
            continue            # named by [market] policy, it is refused there
    return out


def register_opts(conf):
    for name, factory in _installed():
        opts = opts_of(name, factory)
        if opts:
            conf.register_opts(opts, group=group_of(name))


def list_opts():
    return [(group_of(name), opts) for name, factory in _installed()
            for opts in [opts_of(name, factory)] if opts]


def policy_options(conf, name, factory):
    """The constructor arguments of the policy ``name``: its group's values."""
    opts = opts_of(name, factory)
    if not opts:
        return {}
    group = group_of(name)
    conf.register_opts(opts, group=group)       # a policy installed since the start
    values = conf[group]
    return {o.name: values[o.name] for o in opts}
