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

"""Every configuration an operator may paste from the docs or ``etc/`` parses.

Each ``ini`` block of ``doc/source/*.rst`` (and each literal block that
starts with a known section) and each agent configuration under ``etc/`` is
parsed with the real option set: the agent's for its groups (every value
read, nothing unknown, as ``resex-agent --check`` does), the filter's for
nova.conf's ``[resex]``, nova's own for ``[filter_scheduler]``.
"""

import glob
import os
import re
import tempfile
import unittest

from oslo_config import cfg

from resex_agent import check
from resex_agent import config_file
from resex_agent import resex_agent
from resex_nova import conf as filter_conf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
AGENT_GROUPS = set(config_file.known_names()) - {"DEFAULT"}
NOVA_GROUPS = {"filter_scheduler", "resex"}
#: resex-placement-sync's own section (its configuration also has nova's [resex]).
SYNC_GROUPS = {"placement_sync"}
SECTION = re.compile(r"^\[([A-Za-z0-9_]+)\]\s*$")


def blocks(path):
    """``(line, text)`` of each ini-like literal block of an .rst file."""
    lines = open(path, encoding="utf-8").read().splitlines()
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        starts = (line.strip().startswith(".. code-block:: ini")
                  or (line.rstrip().endswith("::") and ".. " not in line))
        if not starts:
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        j = i + 1
        body = []
        while j < len(lines) and (not lines[j].strip()
                                  or len(lines[j]) - len(lines[j].lstrip()) > indent):
            body.append(lines[j])
            j += 1
        text = "\n".join(body).strip("\n")
        first = text.strip().splitlines()[0].strip() if text.strip() else ""
        m = SECTION.match(first)
        if m and (m.group(1) in AGENT_GROUPS | NOVA_GROUPS
                  or line.strip().startswith(".. code-block:: ini")):
            body_indent = min(len(b) - len(b.lstrip()) for b in body if b.strip())
            out.append((i + 1, "\n".join(b[body_indent:] for b in body) + "\n"))
        i = j
    return out


def sections(text):
    return {m.group(1) for m in (SECTION.match(line) for line in text.splitlines()) if m}


class SnippetCase(unittest.TestCase):

    def write(self, text):
        fd, path = tempfile.mkstemp(suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.unlink, path)
        return path

    def check_agent_config(self, path, where):
        conf = resex_agent.make_conf(["--config-file", path])
        try:
            check._validate_options(conf)
        except check._Failed as exc:
            self.fail("%s: %s" % (where, exc.message))

    def check_nova_config(self, path, where):
        import nova.conf.scheduler
        conf = cfg.ConfigOpts()
        filter_conf.register_opts(conf)
        nova.conf.scheduler.register_opts(conf)
        conf(["--config-file", path], project="nova-snippet", default_config_files=[],
             default_config_dirs=[])
        for group in ("resex", "filter_scheduler"):
            for name in conf[group]:
                try:
                    conf[group][name]
                except (cfg.Error, ValueError) as exc:
                    self.fail("%s: [%s] %s: %s" % (where, group, name, exc))
        self.assert_known(path, where, {g: set(conf[g]) for g in ("resex", "filter_scheduler")})

    def assert_known(self, path, where, known):
        """Every option the file at ``path`` sets is in ``known`` (``{group: names}``)."""
        parsed = {}
        cfg.ConfigParser(path, parsed).parse()
        for group, values in parsed.items():
            for key in values:
                self.assertIn(key, known.get(group, ()), "%s: unknown [%s] %s"
                              % (where, group, key))

    def check_sync_config(self, path, where):
        from keystoneauth1 import loading as ks_loading

        from resex_nova import placement_sync
        from resex_nova import sync_conf
        conf = placement_sync.make_conf(["--config-file", path])
        # The auth plugin's own options (auth_url, username, ...) are its type's.
        auth_type = conf[sync_conf.GROUP].auth_type
        if auth_type:
            conf.register_opts(ks_loading.get_auth_plugin_conf_options(auth_type),
                               group=sync_conf.GROUP)
        groups = ("resex", sync_conf.GROUP)
        self.assert_known(path, where, {g: set(conf[g]) for g in groups})
        for group in groups:
            for name in conf[group]:
                try:
                    conf[group][name]
                except (cfg.Error, ValueError) as exc:
                    self.fail("%s: [%s] %s: %s" % (where, group, name, exc))


class DocSnippetsTest(SnippetCase):

    def test_the_docs_have_snippets_to_check(self):
        found = [b for p in glob.glob(os.path.join(ROOT, "doc/source/*.rst")) for b in blocks(p)]
        self.assertGreaterEqual(len(found), 4)

    def test_every_config_snippet_in_the_docs_parses_with_the_real_options(self):
        checked = 0
        for rst in sorted(glob.glob(os.path.join(ROOT, "doc/source/*.rst"))):
            for line, text in blocks(rst):
                where = "%s:%d" % (os.path.relpath(rst, ROOT), line)
                names = sections(text)
                with self.subTest(where=where):
                    path = self.write(text)
                    if names & SYNC_GROUPS and not names & AGENT_GROUPS:
                        self.check_sync_config(path, where)
                    elif names & AGENT_GROUPS and not names & NOVA_GROUPS:
                        self.check_agent_config(path, where)
                    elif names & NOVA_GROUPS and not names & AGENT_GROUPS:
                        self.check_nova_config(path, where)
                    else:
                        self.fail("%s: a snippet mixing the agent's and nova's sections: %s"
                                  % (where, sorted(names)))
                    checked += 1
        self.assertGreaterEqual(checked, 4)

    def test_the_agent_configurations_in_etc_parse_with_the_real_options(self):
        etc = os.path.join(ROOT, "etc", "resex")
        paths = [os.path.join(etc, name) for name in sorted(os.listdir(etc))
                 if name.startswith("resex-agent") and ".conf" in name
                 and "generator" not in name]
        self.assertTrue(paths)
        for path in paths:
            with self.subTest(path=path):
                self.check_agent_config(path, os.path.relpath(path, ROOT))

    def test_the_nova_sample_in_etc_parses_with_the_filters_options(self):
        path = os.path.join(ROOT, "etc/resex/resex-nova.conf.sample")
        self.check_nova_config(path, "etc/resex/resex-nova.conf.sample")


class InlineCommentTest(SnippetCase):

    def test_an_inline_comment_is_named_as_such_without_oslo_internals(self):
        path = self.write("[fabric]\nsource = ib_sysfs   # or libvirt_iface\n")
        conf = resex_agent.make_conf(["--config-file", path])
        with self.assertRaises(check._Failed) as cm:
            check._validate_options(conf)
        message = cm.exception.message
        self.assertIn("[fabric] source", message)
        self.assertIn("comment after a value", message)
        self.assertIn(os.path.basename(path), message)
        self.assertNotIn("LocationInfo", message)

    def test_a_comment_after_a_string_value_is_refused_by_the_check(self):
        # oslo.config would take the user name to be "resex  # ours".
        path = self.write("[nova]\nusername = resex  # ours\npassword = a #b\n")
        conf = resex_agent.make_conf(["--config-file", path])
        with self.assertRaises(check._Failed) as cm:
            check._validate_options(conf)
        self.assertIn("[nova] username", cm.exception.message)
        self.assertNotIn("password", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
