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

"""Sphinx configuration of the resex-libvirt documentation.

Built by ``tox -e docs`` (``sphinx-build -W -b html doc/source
doc/build/html``): every warning is an error. Options are documented from
the code by ``oslo_config.sphinxext`` (the ``resex.agent``, ``resex.nova``
and ``resex.placement_sync`` namespaces of the ``oslo.config.opts`` entry
points).
"""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

project = "resex-libvirt"
copyright = "resex-libvirt developers"
author = "resex-libvirt developers"

extensions = [
    "oslo_config.sphinxext",
    "sphinx.ext.mathjax",
]

master_doc = "index"
exclude_patterns = ["_build"]
pygments_style = "sphinx"
html_theme = "alabaster"
html_static_path = []
html_title = "resex-libvirt"

#: The pages of this documentation's own toctrees (index.rst). Any other
#: ``*.rst`` in this folder is a page about one area, written next to its
#: code (scenarios, hypervisor, fabric, latency, board, scheduler...): it
#: is listed under "The parts" in the order below, then by name, so that a
#: new area page never breaks the build with "document isn't included in
#: any toctree".
OWN_PAGES = {"index", "install", "deployment", "cloud", "sla", "operations", "monitoring",
             "troubleshooting", "versions", "upgrade", "architecture",
             "market", "configuration"}
AREA_ORDER = ["scenarios", "hypervisor", "fabric", "latency", "board", "scheduler"]
AREA_PLACEHOLDER = "   @AREA_PAGES@\n"


def area_pages(srcdir):
    names = {f[:-4] for f in os.listdir(srcdir) if f.endswith(".rst")} - OWN_PAGES
    return ([n for n in AREA_ORDER if n in names]
            + sorted(n for n in names if n not in AREA_ORDER))


def _fill_area_toctree(app, docname, source):
    if docname == "index" and AREA_PLACEHOLDER in source[0]:
        entries = "".join("   %s\n" % name for name in area_pages(app.srcdir))
        source[0] = source[0].replace(AREA_PLACEHOLDER, entries)


def setup(app):
    app.connect("source-read", _fill_area_toctree)
