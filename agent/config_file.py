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

"""What the agent's configuration files say that the agent does not know, in plain words.

oslo.config ignores sections and options it has no registration for, so a
misspelled name silently leaves the default in force; and its value errors
name internal objects (``LocationInfo(...)``). :func:`unknown` lists the
first with the nearest known name, :func:`describe_error` rewrites the
second as ``[group] option = value in FILE: why``.
"""

import dataclasses
import difflib
import os
import re

from oslo_config import cfg

from resex_agent import conf as agent_conf


@dataclasses.dataclass(frozen=True)
class Unknown:
    """A section or option set in ``path`` that the agent does not know."""

    path: str
    group: str
    option: str | None      # None: the whole section is unknown
    nearest: str | None

    def __str__(self):
        where = os.path.basename(self.path)
        if self.option is None:
            text = "unknown section [%s] in %s" % (self.group, where)
        else:
            text = "unknown option [%s] %s in %s" % (self.group, self.option, where)
        return text + (" (did you mean %s?)" % self.nearest if self.nearest else "")


def config_files(conf):
    """The files ``conf`` was parsed from (``--config-file`` and ``--config-dir``)."""
    files = list(conf.config_file or [])
    for directory in conf.config_dir or []:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        files.extend(os.path.join(directory, n) for n in names if n.endswith(".conf"))
    return files


def _group_name(group):
    """A ``list_opts`` group's name: an ``OptGroup``, a name, or ``None`` for DEFAULT."""
    if isinstance(group, cfg.OptGroup):
        return group.name
    return group or "DEFAULT"


def known_names(conf=None):
    """``{group: {option names}}`` the agent registers (``DEFAULT`` included)."""
    groups = {}

    def add(group, opts):
        names = groups.setdefault(group, set())
        for opt in opts:
            names.update((opt.name, opt.dest, opt.name.replace("-", "_")))
            names.update(d.name for d in (opt.deprecated_opts or []) if d.name)

    for group, opts in agent_conf.list_opts():
        add(_group_name(group), opts)
    if conf is not None:
        # Whatever else is registered on this ConfigOpts (oslo.log's DEFAULT
        # options, the command line's, a plugin's own group).
        for key in conf:
            value = conf[key]
            if isinstance(value, cfg.ConfigOpts.GroupAttr):
                groups.setdefault(key, set()).update(value)
            else:
                groups.setdefault("DEFAULT", set()).add(key)
    return groups


def _nearest(name, candidates):
    match = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return match[0] if match else None


def _parsed(conf, files):
    """``(path, {section: {key: [values]}})`` of each file oslo.config can parse."""
    for path in config_files(conf) if files is None else files:
        sections = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except Exception:
            continue            # oslo.config has already accepted or reported it
        yield path, sections


def unknown(conf, files=None):
    """Every :class:`Unknown` section and option in the files ``conf`` read.

    A section is unknown when the agent registers no group of that name; an
    option when its group does not register it. ``[DEFAULT]`` is checked
    against what is registered on ``conf`` (oslo.log's options live there).
    """
    known = known_names(conf)
    found = []
    for path, sections in _parsed(conf, files):
        for section, values in sections.items():
            names = known.get(section)
            if names is None:
                found.append(Unknown(path, section, None, _nearest(section, known)))
                continue
            for key in sorted(values):
                if key not in names and key.replace("-", "_") not in names:
                    found.append(Unknown(path, section, key, _nearest(key, names)))
    return found


def inline_comments(conf, files=None):
    """``[(path, group, option)]`` whose value holds a ``#`` or ``;`` comment.

    oslo.config keeps everything after ``=`` as the value, so
    ``username = resex  # ours`` is the user ``resex  # ours``. Secret
    options are not looked at (a password may hold anything).
    """
    secret = set()
    for group, opts in agent_conf.list_opts():
        secret.update((_group_name(group), o.dest) for o in opts if o.secret)
    found = []
    for path, sections in _parsed(conf, files):
        for section, values in sections.items():
            for key, value in sorted(values.items()):
                if (section, key.replace("-", "_")) in secret:
                    continue
                if any(_COMMENT.search(v) for v in value):
                    found.append((path, section, key))
    return found


_LOCATION = re.compile(r" from LocationInfo\(location=<[^>]*>, detail='([^']*)'\)")
_COMMENT = re.compile(r"\s[#;]")


def describe_error(group, option, exc):
    """``[group] option: why`` for an oslo.config error, without oslo's objects.

    A value with ``#`` or ``;`` after a space is said to hold a comment:
    oslo.config takes everything after ``=`` as the value.
    """
    text = _LOCATION.sub(lambda m: " in %s" % m.group(1), str(exc))
    text = re.sub(r"^Value for option \S+ ", "value ", text)
    where = "[%s] %s" % (group or "DEFAULT", option)
    found = re.search(r"but found '(.*)'$", text) or re.search(r"found '(.*)'", text)
    if found and _COMMENT.search(found.group(1)):
        text += ("; oslo.config does not allow a comment after a value: put the comment "
                 "on a line of its own")
    return "%s: %s" % (where, text)
