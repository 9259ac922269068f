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

"""The devstack plugin's phases, run in bash against a throwaway nova.conf.

devstack itself cannot run here (it installs MySQL, RabbitMQ, systemd units
and the whole of OpenStack), so ``devstack_shim.sh`` stands in for the
devstack functions the plugin calls: the ini helpers with devstack's
documented semantics (``iniset`` replaces, ``iniadd`` appends to a
multi-valued option, ``iniget_multiline`` lists), ``is_service_enabled``
over ``ENABLED_SERVICES``, and recorders for ``run_process``,
``stop_process`` and ``setup_develop``. The plugin's own ``settings`` and
``plugin.sh`` run unchanged, phase after phase, as ``stack.sh``,
``unstack.sh`` and ``clean.sh`` source them. Here the ``resex-agent`` the
plugin runs (``--check`` before the start) is a stub that records its
arguments and answers as told: these tests are about the files and calls
the plugin makes; ``tests/functional/devstack`` runs the real agent.

The resulting files are read back with the real option definitions (nova's
``[filter_scheduler]``, the plugin's ``[resex]``, the agent's groups), and
nova's own loader resolves the filter and weigher paths, so a value nova
would reject fails here; nova-compute's provider config file is read by
nova's own parser (``nova.compute.provider_config``). Every nova.conf here
names a provider config directory of the test's own, as an operator's
``[compute] provider_config_location`` would: the host's
``/etc/nova/provider_config`` is never written.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from oslo_config import cfg

from resex_agent import conf as agent_conf
from resex_agent.conf import board as board_conf
from resex_agent.conf import fabric as fabric_conf
from resex_agent.conf import hypervisor as hypervisor_conf
from resex_agent.conf import latency as latency_conf
from resex_agent.conf import metrics as metrics_conf
import resex_nova.conf as resex_nova_conf

from keystoneauth1 import loading as ks_loading

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "devstack_shim.sh")
PLUGIN = os.path.join(ROOT, "devstack", "plugin.sh")
SETTINGS = os.path.join(ROOT, "devstack", "settings")
FUNCTIONS = os.path.join(ROOT, "tools", "devstack-functions.sh")
BASHATE = os.path.join(os.path.dirname(sys.executable), "bashate")

#: What devstack's lib/nova writes before the plugin's post-config phase.
DEVSTACK_FILTERS = ["ComputeFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
                    "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter",
                    "SameHostFilter", "DifferentHostFilter"]
DEVSTACK_NOVA_CONF = """[DEFAULT]
debug = True
transport_url = rabbit://stackrabbit:secret@192.0.2.10:5672/

[filter_scheduler]
enabled_filters = %s

[scheduler]
workers = 2
""" % ",".join(DEVSTACK_FILTERS)

SERVICE_HOST = "192.0.2.10"

#: The stand-in for the agent's binary: records its arguments, prints
#: $RESEX_TEST_CHECK_OUTPUT and exits with $RESEX_TEST_CHECK_RC.
AGENT_STUB = """#!/bin/bash
echo "resex-agent $*" >> "$RESEX_TEST_RECORD"
[[ -n "$RESEX_TEST_CHECK_OUTPUT" ]] && echo "$RESEX_TEST_CHECK_OUTPUT"
exit "${RESEX_TEST_CHECK_RC:-0}"
"""
AIO = "n-api,n-sch,n-cond,n-cpu,placement-api,etcd3,mysql,rabbit,resex-agent"


class DevstackRun:
    """One node's devstack, as far as the plugin sees it: files and recorded calls."""

    def __init__(self, test, services, nova_conf=DEVSTACK_NOVA_CONF, **env):
        self.tmp = tempfile.mkdtemp(prefix="resex-devstack-")
        test.addCleanup(shutil.rmtree, self.tmp, True)
        self.nova_conf = os.path.join(self.tmp, "nova.conf")
        self.provider_config_dir = os.path.join(self.tmp, "provider_config")
        with open(self.nova_conf, "w") as f:
            f.write(nova_conf)
            if "provider_config_location" not in nova_conf:
                f.write("\n[compute]\nprovider_config_location = %s\n"
                        % self.provider_config_dir)
        self.record = os.path.join(self.tmp, "record")
        self.conf_dir = os.path.join(self.tmp, "etc-resex")
        self.state_dir = os.path.join(self.tmp, "var-lib-resex")
        self.run_dir = os.path.join(self.tmp, "run-resex")
        self.agent_conf = os.path.join(self.conf_dir, "resex-agent.conf")
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        stub = os.path.join(self.bin, "resex-agent")
        with open(stub, "w") as f:
            f.write(AGENT_STUB)
        os.chmod(stub, 0o755)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.tmp,
            "RESEX_TEST_RECORD": self.record,
            "DEST": "/opt/stack",
            "STACK_USER": subprocess.run(["id", "-un"], capture_output=True, text=True,
                                         check=True).stdout.strip(),
            "SERVICE_HOST": SERVICE_HOST,
            "ENABLED_SERVICES": services,
            "NOVA_CONF": self.nova_conf,
            "RESEX_CONF_DIR": self.conf_dir,
            "RESEX_STATE_DIR": self.state_dir,
            "RESEX_RUN_DIR": self.run_dir,
            "RESEX_TEST_BIN": self.bin,
            "RESEX_AGENT_START_WAIT": "0",
            "KEYSTONE_SERVICE_URI": "http://%s/identity" % SERVICE_HOST,
            "SERVICE_PASSWORD": "secret",
            "SERVICE_DOMAIN_NAME": "Default",
            "SERVICE_PROJECT_NAME": "service",
            "REGION_NAME": "RegionOne",
        }
        self.env.update(env)

    def phases(self, *phases):
        """Source settings, then plugin.sh once per ``"mode phase"`` (stack.sh order)."""
        script = ["set -o errexit", "source %s" % SHIM, "source %s" % SETTINGS]
        script += ["source %s %s" % (PLUGIN, phase) for phase in phases]
        return subprocess.run(["bash", "-c", "\n".join(script)], env=self.env,
                              capture_output=True, text=True, timeout=60)

    def stack(self):
        result = self.phases("stack pre-install", "stack install", "stack post-config",
                             "stack extra")
        if result.returncode:
            raise AssertionError("plugin failed: %s" % result.stderr[-3000:])
        return result

    def recorded(self):
        if not os.path.exists(self.record):
            return []
        with open(self.record) as f:
            return f.read().splitlines()

    def nova(self):
        """nova.conf as nova-scheduler reads it (nova's and the plugin's options)."""
        from nova.conf import scheduler as nova_scheduler_conf
        conf = cfg.ConfigOpts()
        conf.register_opts(nova_scheduler_conf.filter_scheduler_opts, group="filter_scheduler")
        resex_nova_conf.register_opts(conf)
        conf(["--config-file", self.nova_conf], project="nova")
        return conf

    def agent(self):
        """resex-agent.conf as the agent reads it."""
        conf = cfg.ConfigOpts()
        agent_conf.register_opts(conf)
        for module in (board_conf, fabric_conf, hypervisor_conf, latency_conf, metrics_conf):
            module.register_opts(conf)
        conf(["--config-file", self.agent_conf], project="resex")
        return conf

    def text(self, path):
        with open(path) as f:
            return f.read()

    def provider_configs(self):
        """The provider config files as nova-compute loads them (nova's own parser)."""
        from nova.compute import provider_config
        return provider_config.get_provider_configs(self.provider_config_dir)

    def placement_sync(self):
        """resex-placement-sync.conf as the service reads it."""
        from resex_nova import placement_sync
        return placement_sync.make_conf(
            ["--config-file", os.path.join(self.conf_dir, "resex-placement-sync.conf")])


class AllInOneTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.node = DevstackRun(self, AIO)
        self.node.stack()

    def test_install_is_setup_develop_with_the_libvirt_extra(self):
        self.assertIn("setup_develop /opt/stack/resex-libvirt libvirt", self.node.recorded())

    def test_benchex_is_installed_before_the_project_that_requires_it(self):
        recorded = self.node.recorded()
        self.assertIn("pip_install /opt/stack/resex-libvirt/benchex", recorded)
        self.assertLess(recorded.index("pip_install /opt/stack/resex-libvirt/benchex"),
                        recorded.index("setup_develop /opt/stack/resex-libvirt libvirt"))

    def test_filter_is_appended_to_devstacks_enabled_filters(self):
        nova = self.node.nova()
        self.assertEqual(DEVSTACK_FILTERS + ["ResExCongestionFilter"],
                         nova.filter_scheduler.enabled_filters)

    def test_available_filters_keeps_novas_default_and_adds_the_filter(self):
        nova = self.node.nova()
        self.assertEqual(["nova.scheduler.filters.all_filters",
                          "resex_nova.filter.ResExCongestionFilter"],
                         nova.filter_scheduler.available_filters)

    def test_weigher_is_appended_to_novas_default_weighers(self):
        nova = self.node.nova()
        self.assertEqual(["nova.scheduler.weights.all_weighers",
                          "resex_nova.weigher.ResExCongestionWeigher"],
                         nova.filter_scheduler.weight_classes)

    def test_nova_loads_every_class_the_plugin_configured(self):
        from nova import objects
        from nova.scheduler import filters
        from nova.scheduler import weights
        objects.register_all()
        nova = self.node.nova()
        classes = filters.HostFilterHandler().get_matching_classes(
            nova.filter_scheduler.available_filters)
        names = {cls.__name__ for cls in classes}
        for name in nova.filter_scheduler.enabled_filters:
            self.assertIn(name, names)
        weighers = weights.HostWeightHandler().get_matching_classes(
            nova.filter_scheduler.weight_classes)
        self.assertIn("ResExCongestionWeigher", {cls.__name__ for cls in weighers})

    def test_board_is_devstacks_etcd3_when_it_runs_here(self):
        url = "etcd3+http://%s:2379" % SERVICE_HOST
        self.assertEqual(url, self.node.nova().resex.board_url)
        self.assertEqual(url, self.node.agent().board.url)

    def test_agent_conf_drives_libvirt(self):
        agent = self.node.agent()
        self.assertEqual("libvirt", agent.agent.host_driver)
        self.assertEqual("qemu:///system", agent.libvirt.connection_uri)
        self.assertEqual(self.node.state_dir, agent.agent.state_dir)
        self.assertEqual(os.path.join(self.node.run_dir, "latency.sock"),
                         agent.latency.probe_socket_path)
        self.assertFalse(agent.metrics.enabled)
        self.assertFalse(agent.remote_claims.enabled)
        # Only the instances that opted in are capped, unless the operator says otherwise.
        self.assertEqual("opted_in", agent.agent.cap_consent)
        self.assertEqual([], agent.agent.consent_projects)
        self.assertEqual([], agent.agent.consent_flavors)
        for path in (self.node.conf_dir, self.node.state_dir, self.node.run_dir):
            self.assertTrue(os.path.isdir(path), path)

    def test_agent_is_checked_then_started_by_run_process_with_its_config(self):
        command = "%s/resex-agent --config-file %s" % (self.node.bin, self.node.agent_conf)
        recorded = self.node.recorded()
        check = recorded.index("resex-agent --config-file %s --check" % self.node.agent_conf)
        start = recorded.index("run_process resex-agent|" + command)
        self.assertLess(check, start)

    def test_the_agent_needs_no_credentials_by_default(self):
        agent = self.node.agent()
        self.assertFalse(agent.nova.sla_lookup)
        self.assertIsNone(agent.nova.auth_type)
        self.assertNotIn("admin", self.node.text(self.node.agent_conf))
        self.assertFalse(any(line.startswith("create_service_user")
                             for line in self.node.recorded()))

    def test_the_link_is_discovered_unless_the_operator_sets_it(self):
        agent = self.node.agent()
        self.assertEqual("libvirt_iface", agent.fabric.source)
        self.assertIsNone(agent.fabric.uplink_netdev)
        self.assertIsNone(agent.fabric.link_capacity_gbps)

    def test_a_second_post_config_changes_nothing(self):
        before = self.node.text(self.node.nova_conf), self.node.text(self.node.agent_conf)
        result = self.node.phases("stack post-config")
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertEqual(before, (self.node.text(self.node.nova_conf),
                                  self.node.text(self.node.agent_conf)))

    def test_unstack_stops_the_agent_and_clean_removes_its_files(self):
        result = self.node.phases("unstack")
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertEqual("stop_process resex-agent", self.node.recorded()[-1])
        self.assertTrue(os.path.exists(self.node.agent_conf))
        result = self.node.phases("clean")
        self.assertEqual(0, result.returncode, result.stderr)
        for path in (self.node.conf_dir, self.node.state_dir, self.node.run_dir):
            self.assertFalse(os.path.exists(path), path)

    def test_nova_conf_keeps_everything_else(self):
        nova = self.node.text(self.node.nova_conf)
        self.assertIn("transport_url = rabbit://stackrabbit:secret@192.0.2.10:5672/", nova)
        self.assertIn("[scheduler]\nworkers = 2", nova)


class PlacementTraitsTest(unittest.TestCase):

    def test_a_node_with_the_agent_marks_its_compute_node_provider_managed(self):
        node = DevstackRun(self, AIO)
        node.stack()
        configs = node.provider_configs()
        self.assertEqual(["$COMPUTE_NODE"], list(configs))
        self.assertEqual(["CUSTOM_RESEX_MANAGED"],
                         configs["$COMPUTE_NODE"]["traits"]["additional"])
        self.assertEqual("resex-managed.yaml", configs["$COMPUTE_NODE"]["__source_file"])

    def test_a_named_provider_when_the_site_already_uses_compute_node(self):
        node = DevstackRun(self, AIO, RESEX_PROVIDER_NAME="compute-7.example.org")
        node.stack()
        configs = node.provider_configs()
        self.assertEqual(["compute-7.example.org"], list(configs))
        self.assertEqual({"name": "compute-7.example.org"},
                         configs["compute-7.example.org"]["identification"])

    def test_the_file_goes_where_nova_compute_reads_and_clean_removes_it(self):
        node = DevstackRun(self, AIO)
        node.stack()
        path = os.path.join(node.provider_config_dir, "resex-managed.yaml")
        self.assertTrue(os.path.exists(path))
        result = node.phases("clean")
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertFalse(os.path.exists(path))

    def test_a_scheduler_without_the_agent_writes_no_provider_config(self):
        node = DevstackRun(self, "n-api,n-sch,etcd3")
        node.stack()
        self.assertFalse(os.path.exists(node.provider_config_dir))

    def test_the_sync_service_gets_the_board_and_credentials_of_its_own(self):
        node = DevstackRun(self, "n-api,n-sch,etcd3,keystone,placement-api,"
                                 "resex-placement-sync")
        node.stack()
        conf = node.placement_sync()
        self.assertEqual("etcd3+http://%s:2379" % SERVICE_HOST, conf.resex.board_url)
        self.assertEqual(node.nova().resex.board_url, conf.resex.board_url)
        auth = ks_loading.load_auth_from_conf_options(conf, "placement_sync")
        self.assertEqual("http://%s/identity" % SERVICE_HOST, auth.auth_url)
        self.assertEqual("resex", conf.placement_sync.username)
        self.assertEqual("password", conf.placement_sync.auth_type)
        self.assertEqual("placement", conf.placement_sync.service_type)
        self.assertEqual("RegionOne", conf.placement_sync.region_name)
        self.assertIn("create_service_user resex admin", node.recorded())
        command = "%s/resex-placement-sync --config-file %s" % (
            node.bin, os.path.join(node.conf_dir, "resex-placement-sync.conf"))
        self.assertIn("run_process resex-placement-sync|" + command, node.recorded())
        result = node.phases("unstack")
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertEqual("stop_process resex-placement-sync", node.recorded()[-1])

    def test_without_the_sync_service_no_credentials_are_made(self):
        node = DevstackRun(self, AIO + ",keystone")
        node.stack()
        self.assertFalse(os.path.exists(os.path.join(node.conf_dir,
                                                     "resex-placement-sync.conf")))
        self.assertFalse(any(line.startswith("create_service_user")
                             for line in node.recorded()))


class AgentStartTest(unittest.TestCase):

    def test_a_failing_check_stops_the_stack_with_its_report_and_starts_nothing(self):
        node = DevstackRun(self, AIO, RESEX_TEST_CHECK_RC="1",
                           RESEX_TEST_CHECK_OUTPUT="ERROR: board: etcd3+http://192.0.2.10:2379: "
                                                   "connection refused")
        result = node.phases("stack install", "stack post-config", "stack extra")
        self.assertNotEqual(0, result.returncode)
        self.assertIn("resex-agent --check failed, not starting the agent", result.stderr)
        self.assertIn("ERROR: board: etcd3+http://192.0.2.10:2379", result.stderr)
        self.assertFalse(any(line.startswith("run_process") for line in node.recorded()))

    def test_the_optional_compute_api_lookup_uses_the_agents_own_service_user(self):
        node = DevstackRun(self, AIO + ",keystone", RESEX_NOVA_SLA_LOOKUP="yes")
        node.stack()
        self.assertIn("create_service_user resex admin", node.recorded())
        agent = node.agent()
        self.assertTrue(agent.nova.sla_lookup)
        self.assertEqual("RegionOne", agent.nova.region_name)
        auth = ks_loading.load_auth_from_conf_options(agent, "nova")
        self.assertEqual("resex", agent.nova.username)
        self.assertEqual("password", agent.nova.auth_type)
        self.assertEqual("http://%s/identity" % SERVICE_HOST, auth.auth_url)

    def test_link_capacity_and_uplink_reach_the_agent_when_set(self):
        node = DevstackRun(self, AIO, RESEX_LINK_CAPACITY_GBPS="25", RESEX_UPLINK_NETDEV="br-ex")
        node.stack()
        agent = node.agent()
        self.assertEqual(25.0, agent.fabric.link_capacity_gbps)
        self.assertEqual("br-ex", agent.fabric.uplink_netdev)

    def test_remote_claims_reach_the_agent_when_set(self):
        node = DevstackRun(self, AIO, RESEX_REMOTE_CLAIMS="True")
        node.stack()
        self.assertTrue(node.agent().remote_claims.enabled)

    def test_the_topology_file_reaches_the_scheduler_and_with_remote_claims_the_agent(self):
        node = DevstackRun(self, AIO, RESEX_TOPOLOGY_FILE="/etc/resex/topology.yaml")
        node.stack()
        self.assertEqual("/etc/resex/topology.yaml", node.nova().resex.topology_file)
        self.assertEqual("", node.agent().remote_claims.topology_file)
        node = DevstackRun(self, AIO, RESEX_TOPOLOGY_FILE="/etc/resex/topology.yaml",
                           RESEX_REMOTE_CLAIMS="True")
        node.stack()
        self.assertEqual("/etc/resex/topology.yaml", node.agent().remote_claims.topology_file)

    def test_the_consent_rule_and_its_lists_reach_the_agent_when_set(self):
        node = DevstackRun(self, AIO, RESEX_CAP_CONSENT="all",
                           RESEX_CONSENT_PROJECTS="8d6f0c2a4b1e4f3a,0b1c2d3e",
                           RESEX_CONSENT_FLAVORS="m1.bulk")
        node.stack()
        agent = node.agent().agent
        self.assertEqual("all", agent.cap_consent)
        self.assertEqual(["8d6f0c2a4b1e4f3a", "0b1c2d3e"], agent.consent_projects)
        self.assertEqual(["m1.bulk"], agent.consent_flavors)


class PackagesTest(unittest.TestCase):
    """Plugin packages are in devstack/files/bindep.txt, which stack.sh installs."""

    LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9.+_-]*)\s+\[(?P<profiles>[^]]+)\]$")

    def packages(self):
        found = {}
        with open(os.path.join(ROOT, "devstack", "files", "bindep.txt")) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                match = self.LINE.match(line)
                self.assertIsNotNone(match, "not bindep syntax: %r" % line)
                for profile in match.group("profiles").split():
                    found.setdefault(profile, set()).add(match.group("name"))
        return found

    def test_libvirt_python_can_be_built_on_debian_and_rpm_distributions(self):
        found = self.packages()
        self.assertLessEqual({"libvirt-dev", "pkg-config", "gcc", "python3-dev"},
                             found["platform:dpkg"])
        self.assertLessEqual({"libvirt-devel", "gcc", "python3-devel"}, found["platform:rpm"])


class ExistingSchedulerSettingsTest(unittest.TestCase):

    def test_operator_lists_are_appended_to_not_overwritten(self):
        nova_conf = DEVSTACK_NOVA_CONF.replace("[filter_scheduler]\n", """[filter_scheduler]
available_filters = nova.scheduler.filters.all_filters
available_filters = nova.scheduler.filters.compute_filter.ComputeFilter
weight_classes = nova.scheduler.weights.ram.RAMWeigher, nova.scheduler.weights.cpu.CPUWeigher
""")
        node = DevstackRun(self, AIO, nova_conf=nova_conf)
        node.stack()
        nova = node.nova()
        self.assertEqual(["nova.scheduler.filters.all_filters",
                          "nova.scheduler.filters.compute_filter.ComputeFilter",
                          "resex_nova.filter.ResExCongestionFilter"],
                         nova.filter_scheduler.available_filters)
        self.assertEqual(["nova.scheduler.weights.ram.RAMWeigher",
                          "nova.scheduler.weights.cpu.CPUWeigher",
                          "resex_nova.weigher.ResExCongestionWeigher"],
                         nova.filter_scheduler.weight_classes)
        result = node.phases("stack post-config")
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertEqual(3, len(node.nova().filter_scheduler.available_filters))
        self.assertEqual(DEVSTACK_FILTERS + ["ResExCongestionFilter"],
                         node.nova().filter_scheduler.enabled_filters)

    def test_unset_enabled_filters_start_from_novas_defaults(self):
        node = DevstackRun(self, AIO, nova_conf="[DEFAULT]\ndebug = True\n")
        node.stack()
        from nova.conf import scheduler as nova_scheduler_conf
        default = [o for o in nova_scheduler_conf.filter_scheduler_opts
                   if o.name == "enabled_filters"][0].default
        self.assertEqual(list(default) + ["ResExCongestionFilter"],
                         node.nova().filter_scheduler.enabled_filters)


class BoardBackendTest(unittest.TestCase):

    def test_without_etcd3_the_board_is_sqlite_in_the_state_dir(self):
        node = DevstackRun(self, AIO.replace("etcd3,", ""))
        node.stack()
        url = "sqlite://%s/board.sqlite" % node.state_dir
        self.assertEqual(url, node.nova().resex.board_url)
        self.assertEqual(url, node.agent().board.url)

    def test_an_explicit_board_url_wins(self):
        node = DevstackRun(self, AIO, RESEX_BOARD_URL="etcd3+https://etcd.example:2379")
        node.stack()
        self.assertEqual("etcd3+https://etcd.example:2379", node.nova().resex.board_url)

    def test_an_ipv6_service_host_is_bracketed(self):
        node = DevstackRun(self, AIO, SERVICE_HOST="2001:db8::10")
        node.stack()
        self.assertEqual("etcd3+http://[2001:db8::10]:2379", node.agent().board.url)

    def test_an_unknown_backend_stops_the_stack(self):
        node = DevstackRun(self, AIO, RESEX_BOARD_BACKEND="zookeeper")
        result = node.phases("stack post-config")
        self.assertNotEqual(0, result.returncode)
        self.assertIn("RESEX_BOARD_BACKEND", result.stderr)


class MultinodeTest(unittest.TestCase):

    def test_a_compute_node_with_the_default_backend_publishes_to_the_controllers_etcd(self):
        node = DevstackRun(self, "n-cpu,placement-client,resex-agent")
        node.stack()
        self.assertEqual("etcd3+http://%s:2379" % SERVICE_HOST, node.agent().board.url)

    def test_a_sqlite_board_where_no_scheduler_reads_it_stops_the_stack(self):
        node = DevstackRun(self, "n-cpu,resex-agent", RESEX_BOARD_BACKEND="sqlite")
        result = node.phases("stack post-config")
        self.assertNotEqual(0, result.returncode)
        self.assertIn("read by no scheduler", result.stderr)
        self.assertFalse(os.path.exists(node.agent_conf))

    def test_compute_node_runs_the_agent_on_the_controllers_etcd_and_leaves_nova_alone(self):
        node = DevstackRun(self, "n-cpu,placement-client,resex-agent",
                           RESEX_BOARD_BACKEND="etcd3")
        before = node.text(node.nova_conf)
        node.stack()
        self.assertEqual(before, node.text(node.nova_conf))
        self.assertEqual("etcd3+http://%s:2379" % SERVICE_HOST, node.agent().board.url)
        self.assertTrue(any(line.startswith("run_process resex-agent|")
                            for line in node.recorded()))

    def test_agent_publishes_under_novas_host_name_when_nova_sets_one(self):
        node = DevstackRun(self, "n-cpu,resex-agent", RESEX_BOARD_BACKEND="etcd3",
                           nova_conf="[DEFAULT]\nhost = compute-7\n")
        node.stack()
        self.assertEqual("compute-7", node.agent().agent.host)

    def test_scheduler_without_the_agent_writes_no_agent_config(self):
        node = DevstackRun(self, "n-api,n-sch,etcd3")
        node.stack()
        self.assertFalse(os.path.exists(node.agent_conf))
        self.assertFalse(any(line.startswith("run_process") for line in node.recorded()))
        self.assertIn("ResExCongestionFilter", node.nova().filter_scheduler.enabled_filters)


class BashateTest(unittest.TestCase):

    def test_plugin_settings_and_shim_are_bashate_clean(self):
        result = subprocess.run([BASHATE, "-v", PLUGIN, SETTINGS, SHIM, FUNCTIONS],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(0, result.returncode, result.stdout + result.stderr)
        self.assertNotIn("warning", result.stdout + result.stderr)


class SamplesTest(unittest.TestCase):

    def test_the_samples_list_every_installed_policy(self):
        from importlib import metadata
        installed = {ep.name for ep in metadata.entry_points(group="resex.policies")}
        samples = os.path.join(ROOT, "devstack", "samples")
        lists = []
        for name in sorted(os.listdir(samples)):
            with open(os.path.join(samples, name)) as f:
                lists += [(name, {p.strip() for p in m.group(1).split("|")})
                          for m in re.finditer(r"(?m)^#?\s*RESEX_POLICY=\S+\s+#\s*(.*)$",
                                               f.read())]
        self.assertTrue(lists)
        for name, listed in lists:
            self.assertEqual(installed, listed, name)
