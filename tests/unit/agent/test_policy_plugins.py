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

"""Pricing policies are plugins: the agent selects any installed ``resex.policies`` entry point.

A throwaway distribution (a module and its ``*.dist-info`` with an
``entry_points.txt``, in a temporary directory put on ``sys.path``) stands
for a third-party package: nothing in this repository names it.
"""

import importlib
import io
import os
import sys
import tempfile
import textwrap
import unittest

import fixtures
from stevedore import extension

from resex_agent import builder
from resex_agent import check
from resex_libvirt import exceptions
from resex_libvirt.market import policy as policy_mod
from tests.unit.agent import conf_helpers
from tests.unit.agent import test_loop

MODULE = "resex_thirdparty_policy"

THIRD_PARTY = textwrap.dedent('''
    from resex_libvirt.market import policy


    class FlatCap(policy.PerVM):
        """Caps every VM at (1 - step) of its limit, whatever happens."""

        name = "flat_cap"
        options = (policy.Option("step", 0.1, min=0.0, max=0.9,
                                 help="How far below its limit flat_cap holds every VM."),)

        def __init__(self, **options):
            self.step = policy.configure(self.options, options).step

        def decide_vm(self, vm, step):
            return vm.limit_pct * (1.0 - self.step), 1.0, "flat"
''')


class ThirdPartyPolicy(fixtures.Fixture):
    """Install a policy distribution for the duration of a test, outside the repository.

    ``source`` is the module's text, ``target`` its entry point target.
    """

    def __init__(self, name, source=THIRD_PARTY, target=MODULE + ":FlatCap"):
        super().__init__()
        self.name, self.source, self.target = name, source, target

    def _setUp(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        with open(os.path.join(tmp, MODULE + ".py"), "w") as f:
            f.write(self.source)
        info = os.path.join(tmp, "resex_thirdparty_policy-1.0.dist-info")
        os.mkdir(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: resex-thirdparty-policy\nVersion: 1.0\n")
        with open(os.path.join(info, "entry_points.txt"), "w") as f:
            f.write("[%s]\n%s = %s\n" % (policy_mod.NAMESPACE, self.name, self.target))
        sys.path.insert(0, tmp)
        self._forget()
        self.addCleanup(self._forget)
        self.addCleanup(sys.path.remove, tmp)

    @staticmethod
    def _forget():
        # The caches that would hide (or keep) the entry point: importlib's
        # path finders, the module itself, and stevedore's per-process
        # entry point list (its on-disk cache is keyed by sys.path).
        importlib.invalidate_caches()
        sys.modules.pop(MODULE, None)
        extension.ExtensionManager.ENTRY_POINT_CACHE.pop(policy_mod.NAMESPACE, None)


class BuiltinPoliciesTest(unittest.TestCase):

    def test_the_builtin_policies_are_entry_points_loaded_by_stevedore(self):
        from resex_libvirt.market import free_market
        from resex_libvirt.market import io_shares
        names = policy_mod.names()
        for name, cls in (("none", policy_mod.NoControl), ("free_market", free_market.FreeMarket),
                          ("io_shares", io_shares.IOShares)):
            self.assertIn(name, names)
            self.assertIs(cls, policy_mod.factory(name))
            self.assertEqual(name, policy_mod.load(name).name)

    def test_an_unknown_name_is_refused_listing_the_installed_policies(self):
        with self.assertRaises(policy_mod.UnknownPolicy) as ctx:
            policy_mod.load("no_such_policy")
        self.assertIn("'no_such_policy'", str(ctx.exception))
        self.assertIn("io_shares", str(ctx.exception))
        self.assertEqual(tuple(policy_mod.names()), ctx.exception.installed)

    def test_every_policy_this_package_installs_is_documented_in_the_option_help(self):
        from importlib import metadata

        from resex_agent.conf import market as market_conf
        ours = {ep.name for ep in metadata.distribution("resex-libvirt").entry_points
                if ep.group == policy_mod.NAMESPACE}
        help_text = [o for o in market_conf.OPTS if o.name == "policy"][0].help
        self.assertTrue(ours)
        for name in ours:
            self.assertIn("``%s``" % name, help_text)


class ThirdPartyPolicyTest(unittest.TestCase):

    def test_an_installed_third_party_policy_is_selected_by_the_agent_config(self):
        self.assertNotIn("flat_cap", policy_mod.names())
        with ThirdPartyPolicy("flat_cap"):
            self.assertIn("flat_cap", policy_mod.names())
            conf = conf_helpers.conf_from_text(
                "[market]\npolicy = flat_cap\n[market_flat_cap]\nstep = 0.5\n")
            policy = builder.build_policy(conf)
            self.assertEqual("flat_cap", policy.name)
            self.assertEqual(sys.modules[MODULE].FlatCap, type(policy))
            # It gets its own option group's values, as a built-in policy does.
            self.assertEqual(0.5, policy.step)
            # And it runs the host: every VM capped at (1 - step) of its limit
            # (the default step, 0.1, in this agent).
            agent, sim = test_loop.build(policy="flat_cap", duration=1.0)
            agent.run()
            for name in ("vm64k", "vm2m"):
                self.assertEqual(90.0, agent.market.decision(sim.uuid_of(name)).cap_pct)
        self.assertNotIn("flat_cap", policy_mod.names())

    def test_its_option_group_shows_in_the_generated_sample_config(self):
        from oslo_config import generator
        with tempfile.TemporaryDirectory() as tmp, ThirdPartyPolicy("flat_cap"):
            out = os.path.join(tmp, "resex-agent.conf.sample")
            generator.main(["--namespace", "resex.agent", "--output-file", out])
            with open(out) as f:
                text = f.read()
        self.assertIn("[market_flat_cap]", text)
        section = text[text.index("[market_flat_cap]"):]
        self.assertIn("How far below its limit flat_cap holds every VM.", section)
        self.assertIn("#step = 0.1", section)
        # The built-in policies' groups come the same way.
        for name in ("free_market", "io_shares", "latency_target"):
            self.assertIn("[market_%s]" % name, text)

    def test_a_value_the_policy_refuses_is_a_configuration_error(self):
        conf = conf_helpers.conf_from_text(
            "[market]\npolicy = latency_target\n[market_latency_target]\ngain = 0\n")
        with self.assertRaises(exceptions.ConfigError) as ctx:
            builder.build_policy(conf)
        self.assertIn("[market_latency_target] gain", str(ctx.exception))

    def test_check_accepts_an_installed_third_party_policy(self):
        with ThirdPartyPolicy("flat_cap"):
            out = io.StringIO()
            code = check.run_check(conf_helpers.conf_from_text("[market]\npolicy = flat_cap\n"),
                                   out=out)
        self.assertEqual(0, code, out.getvalue())
        self.assertIn("policy flat_cap", out.getvalue())

    def test_a_third_party_policy_that_does_not_import_is_a_configuration_error(self):
        broken = "import resex_no_such_module_anywhere\n"
        with ThirdPartyPolicy("broken", source=broken, target=MODULE + ":Nothing"):
            conf = conf_helpers.conf_from_text("[market]\npolicy = broken\n")
            with self.assertRaises(exceptions.ConfigError) as ctx:
                builder.build_policy(conf)
        self.assertIn("'broken'", str(ctx.exception))
        self.assertIn("resex_no_such_module_anywhere", str(ctx.exception))


class BuiltinPolicyOptionsTest(unittest.TestCase):

    def test_latency_target_takes_its_parameters_from_its_own_group(self):
        conf = conf_helpers.conf_from_text(
            "[market]\npolicy = latency_target\n"
            "[market_latency_target]\ngain = 0.5\ntarget = 0.6\nboost = 2.0\n")
        policy = builder.build_policy(conf)
        self.assertEqual((0.5, 0.6, 2.0),
                         (policy.opts.gain, policy.opts.target, policy.opts.boost))

    def test_a_tunable_set_in_market_before_the_groups_is_still_honoured(self):
        conf = conf_helpers.conf_from_text(
            "[market]\npolicy = io_shares\nheavier = 2.0\nstep = 0.2\n")
        policy = builder.build_policy(conf)
        self.assertEqual((2.0, 0.2), (policy.opts.heavier, policy.opts.step))
        # ...by the policies that read it there, not by the others.
        conf = conf_helpers.conf_from_text(
            "[market]\npolicy = latency_target\nheavier = 2.0\n")
        self.assertEqual(0.0, builder.build_policy(conf).opts.heavier)


class ConfiguredPolicyValidationTest(unittest.TestCase):

    def test_the_agent_refuses_to_start_with_a_policy_that_is_not_installed(self):
        conf = conf_helpers.conf_from_text("[market]\npolicy = flat_cap\n")
        with self.assertRaises(exceptions.ConfigError) as ctx:
            builder.build_agent(conf)
        self.assertIn("[market] policy", str(ctx.exception))
        self.assertIn("'flat_cap'", str(ctx.exception))
        for name in policy_mod.names():
            self.assertIn(name, str(ctx.exception))

    def test_check_fails_on_a_policy_that_is_not_installed_listing_the_installed(self):
        out = io.StringIO()
        code = check.run_check(conf_helpers.conf_from_text("[market]\npolicy = flat_cap\n"),
                               out=out)
        self.assertEqual(1, code)
        self.assertIn("ERROR: configuration: [market] policy: unknown policy 'flat_cap'",
                      out.getvalue())
        self.assertIn("io_shares", out.getvalue())

    def test_a_reload_naming_a_policy_not_installed_changes_nothing(self):
        agent, _sim = test_loop.build(duration=1.0)
        before = (agent.market.params, agent.market.policy, agent.controller.deadband_pct)
        conf = test_loop.make_conf(market={"policy": "flat_cap", "cpu_price": 3.0},
                                   agent={"deadband_pct": 7.0})
        with self.assertRaises(exceptions.ConfigError):
            builder.reload_market(conf, agent)
        self.assertEqual(before, (agent.market.params, agent.market.policy,
                                  agent.controller.deadband_pct))
