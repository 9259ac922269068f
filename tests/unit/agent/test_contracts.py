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

"""The agent's code keeps to its contracts: capabilities declared, functions short."""

import ast
import os
import unittest

import resex_agent

AGENT = os.path.dirname(os.path.abspath(resex_agent.__file__))

#: The longest function the agent's package may hold, in lines.
MAX_FUNCTION_LINES = 80


def _trees():
    for folder, _dirs, files in os.walk(AGENT):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    yield os.path.relpath(path, os.path.dirname(AGENT)), ast.parse(f.read())


def _calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == name]


class ContractsTest(unittest.TestCase):

    def test_no_part_is_probed_for_a_member_its_interface_does_not_declare(self):
        # getattr(x, "name", default) and hasattr(x, "name") ask a part whether
        # it has a member; the agent's parts declare theirs (the adapters'
        # base classes and their capabilities, as data). A two-argument
        # getattr asks nothing.
        probes = ["%s:%d" % (path, call.lineno) for path, tree in _trees()
                  for call in _calls(tree, "getattr") + _calls(tree, "hasattr")
                  if call.func.id == "hasattr" or len(call.args) > 2]
        self.assertEqual([], probes)

    def test_no_class_forwards_any_name(self):
        # A __getattr__ proxy answers every probe and every name: the agent's
        # proxies (resex_agent.watchdog.Guarded) forward an explicit list.
        forwarding = ["%s:%d %s.%s" % (path, node.lineno, cls.name, node.name)
                      for path, tree in _trees()
                      for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
                      for node in cls.body if isinstance(node, ast.FunctionDef)
                      and node.name in ("__getattr__", "__getattribute__")]
        self.assertEqual([], forwarding)

    def test_no_part_is_probed_with_a_protocol(self):
        # runtime_checkable Protocols checked with isinstance are hasattr
        # probes; capabilities are declared as data instead.
        checkable = ["%s:%d" % (path, node.lineno) for path, tree in _trees()
                     for node in ast.walk(tree)
                     if isinstance(node, ast.Attribute) and node.attr == "runtime_checkable"]
        self.assertEqual([], checkable)

    def test_no_function_is_longer_than_80_lines(self):
        long = ["%s:%d %s (%d lines)" % (path, node.lineno, node.name,
                                         node.end_lineno - node.lineno + 1)
                for path, tree in _trees() for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
        self.assertEqual([], long)
