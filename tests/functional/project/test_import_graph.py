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

"""No import circle anywhere in the tree, and no import against the layering.

The graph is read from the source (``ast``), so an import done lazily inside
a function, which hides a circle from Python at import time, still counts.
An edge goes from a module to each module it names: ``from a.b import c``
is an edge to ``a.b.c`` when that is a module of the tree, else to ``a.b``.
A package's parents (``a`` and ``a.b`` when importing ``a.b.c``) are not
edges: Python imports them first, whatever the importer.
"""

import ast
import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
#: ``{package: its directory}``: the agent and the scheduler's plugin install
#: under namespaced names from directories that keep their short names.
PACKAGES = {"resex_libvirt": "resex_libvirt", "resex_research": "resex_research",
            "resex_agent": "agent", "resex_nova": "nova_filter",
            "nova_filter": os.path.join("compat", "nova_filter"), "benchex": "benchex",
            "bench": "bench", "tests": "tests", "tools": "tools"}


def modules(root=ROOT, packages=PACKAGES):
    """``{dotted name: path}`` of every Python module under ``packages``.

    ``packages`` maps each package to its directory under ``root`` (a
    sequence of names: each in the directory of its name).
    """
    found = {}
    if not isinstance(packages, dict):
        packages = {package: package for package in packages}
    for package, directory in packages.items():
        top = os.path.join(root, directory)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__"
                                 and not d.endswith(".egg-info") and d != "build")
            rel = [package] + [p for p in os.path.relpath(dirpath, top).split(os.sep)
                               if p != "."]
            for name in filenames:
                if not name.endswith(".py"):
                    continue
                parts = rel if name == "__init__.py" else rel + [name[:-3]]
                found[".".join(parts)] = os.path.join(dirpath, name)
    return found


def imports(found):
    """``{module: set of dotted names it imports}`` (anything, not only the tree)."""
    out = {}
    for name, path in found.items():
        is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")
                    base = base[:len(base) - node.level + (1 if is_package else 0)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module
                for alias in node.names:
                    sub = "%s.%s" % (module, alias.name)
                    targets.add(sub if sub in found else module)
        out[name] = targets
    return out


def graph(found):
    """``{module: set of modules of the tree it imports}``."""
    return {name: {t for t in targets if t in found and t != name}
            for name, targets in imports(found).items()}


def cycles(edges):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


#: ``{package: top-level packages it may not import}``: the product's library
#: (``resex_libvirt``) imports neither the services that configure it nor
#: Nova nor the research built on it; the agent not the research; the
#: scheduler's plugin (``resex_nova``) not libvirt (the scheduler host has
#: none) nor the research. The research may import anything.
FORBIDDEN = {
    "resex_libvirt": ("nova", "oslo_config", "resex_agent", "resex_nova", "nova_filter",
                      "resex_research"),
    "resex_agent": ("resex_research", "nova_filter"),
    "resex_nova": ("libvirt", "resex_agent", "nova_filter", "resex_research"),
    "nova_filter": ("libvirt", "resex_agent", "resex_research"),
}


def layering_violations(imported):
    """``"module imports target"`` for each import :data:`FORBIDDEN` forbids, sorted."""
    return sorted("%s imports %s" % (module, target)
                  for module, targets in imported.items()
                  for target in targets
                  if target.split(".")[0] in FORBIDDEN.get(module.split(".")[0], ()))


class ImportGraphTest(unittest.TestCase):

    def test_no_module_of_the_tree_takes_part_in_an_import_circle(self):
        found = modules()
        self.assertIn("resex_libvirt.market.policy", found)
        self.assertIn("resex_agent.intake.server", found)
        self.assertEqual(os.path.join(ROOT, "nova_filter", "filter.py"),
                         found["resex_nova.filter"])
        self.assertEqual([], cycles(graph(found)))

    def test_each_package_imports_only_what_is_below_it(self):
        # The product's library takes plain arguments: agent/ and nova_filter/
        # read the configuration, nova is the scheduler's, and the research
        # (resex_research) sits on top of the product, never under it.
        self.assertEqual([], layering_violations(imports(modules())))

    def test_the_layering_check_sees_a_forbidden_import_made_lazily(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            files = {("resex_libvirt", "__init__.py"): "",
                     ("resex_libvirt", "fleet.py"): "def f():\n    from nova import objects\n",
                     ("resex_agent", "__init__.py"): "from resex_research import paper\n",
                     ("resex_nova", "__init__.py"): "import libvirt\n",
                     ("resex_research", "__init__.py"): "import nova.conf\nimport resex_agent\n"}
            for (package, name), text in files.items():
                os.makedirs(os.path.join(tmp, package), exist_ok=True)
                with open(os.path.join(tmp, package, name), "w") as f:
                    f.write(text)
            found = modules(tmp, ("resex_libvirt", "resex_agent", "resex_nova", "resex_research"))
            self.assertEqual(["resex_agent imports resex_research",
                              "resex_libvirt.fleet imports nova",
                              "resex_nova imports libvirt"],
                             layering_violations(imports(found)))

    def test_the_checker_finds_a_circle_made_by_a_lazy_import(self):
        # The circle policies once had: the base module importing, inside a
        # function, the modules that subclass it.
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "pkg"))
            files = {"__init__.py": "",
                     "base.py": "def builtin():\n    from pkg import impl\n    return impl\n",
                     "impl.py": "from pkg import base\n",
                     "other.py": "from . import base\n"}
            for name, text in files.items():
                with open(os.path.join(tmp, "pkg", name), "w") as f:
                    f.write(text)
            self.assertEqual([["pkg.base", "pkg.impl"]],
                             cycles(graph(modules(tmp, ("pkg",)))))
