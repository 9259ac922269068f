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

"""Hostile board records: what a broken or malicious compute node can store under its key.

:func:`record` draws one from a :class:`random.Random` and says what a
reader must make of it: :data:`VALID` (accepted), :data:`MISPLACED` (a valid
record naming another host than the key), :data:`INVALID` (rejected), or
``None`` when it depends (a flipped bit may leave a valid record).
"""

import json

from resex_libvirt.board import report as report_mod
from tests.unit.board import reports

VALID, MISPLACED, INVALID = "valid", "misplaced", "invalid"

#: JSON tokens no field of a valid record may hold... and some it may (``None``: depends).
NASTY = [
    ("NaN", INVALID), ("Infinity", INVALID), ("-Infinity", INVALID), ("1e400", INVALID),
    ("-1e400", INVALID), ("9" * 400, INVALID), ("-" + "9" * 400, INVALID),
    ("1" + "0" * 4400, INVALID), (str(2 ** 64), None), ('"\\ud800"', INVALID),
    ('"a\\udfff"', INVALID), ("-1", None), ("-0", None), ("0", None), ("1e-400", None),
    ("4.9e-324", None), ("1.5", None), (str(2 ** 53), None), ("null", None),
    ("true", None), ("false", None), ('""', None), ('" "', None), ('"\\u0000"', None),
    ("[]", None), ("{}", None), ("[1]", None), ('{"a": 1}', None), ('"1.\\u00b2"', None),
    ('"\\u0661.\\u0660"', None), ('"x"', None), ("1e308", None), ("2e308", INVALID),
]

#: ``version`` values, and what a 1.x reader makes of them.
VERSIONS = [
    ('"1.3"', VALID), ("1", VALID), ('"1.0"', VALID), ('"1.99"', VALID), ('"01.3"', VALID),
    ('"2.0"', INVALID), ("2", INVALID), ("1.0", INVALID), ('"1."', INVALID), ('".1"', INVALID),
    ('"1.\\u00b2"', INVALID), ('"\\u0661.\\u0660"', INVALID), ('"1.3.1"', INVALID),
    ("true", INVALID), ("null", INVALID), (str(10 ** 300), INVALID),
    ('"1.' + "0" * 20 + '"', INVALID),
]

FIELDS = list(reports.make().to_dict())
TEXT_FIELDS = ("host", "agent_version", "state")
PLACEHOLDER = "\u2603hostile\u2603"


def valid(rng, host):
    """A valid record of ``host`` with random figures."""
    vms = rng.randrange(0, 50)
    util = rng.random()
    projects = [{"project": "p%d" % i, "vms": 1, "sensitive_vms": rng.randrange(2),
                 "heavy_io_vms": 0} for i in range(min(vms, rng.randrange(0, 4)))]
    return reports.make(
        host, ts=rng.uniform(0, 2e9), epoch=rng.randrange(0, 2 ** 40), vms=vms,
        sensitive_vms=rng.randrange(0, vms + 1), link_utilisation=util,
        untaxable_utilisation=rng.uniform(0, 1), latency_inflation_pct=rng.uniform(0, 9900),
        io_price=rng.uniform(0, 1e6), state=rng.choice(["controlling", "blind", "other"]),
        projects=projects).to_dict()


def _dumps(data):
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def _with_token(data, field, token):
    """``data`` as JSON text with ``field``'s value replaced by the raw JSON ``token``."""
    data = dict(data)
    data[field] = PLACEHOLDER
    return _dumps(data).replace(json.dumps(PLACEHOLDER), token, 1)


def _projects(rng, data):
    """``projects`` garbage: too many, duplicated, wrong types, counts over the record's."""
    entries = []
    for i in range(rng.choice([0, 1, 2, 33, 40])):
        entry = {"project": "p%d" % (i if rng.random() < 0.9 else 0), "vms": 1}
        if rng.random() < 0.2:
            entry[rng.choice(["project", "vms", "sensitive_vms", "x"])] = rng.choice(
                [None, -1, "", "\ud800", 2.0, [], "y" * 65, 10 ** 20, 2])
        entries.append(entry if rng.random() < 0.95 else rng.choice([1, "p", None, []]))
    data = dict(data, projects=entries if rng.random() < 0.9 else {"p": 1})
    return _dumps(data).encode(), None


def record(rng, host):
    """One hostile ``(raw bytes, expected)`` for the key of ``host`` (module docstring)."""
    data = valid(rng, host)
    text = _dumps(data)
    kind = rng.randrange(17)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 700)), None
    if kind == 1:
        return text.encode()[:rng.randrange(0, len(text))], INVALID
    if kind == 2:
        token, expected = rng.choice(NASTY)
        return _with_token(data, rng.choice(FIELDS), token).encode(), expected
    if kind == 3:
        del data[rng.choice(FIELDS)]
        return _dumps(data).encode(), None
    if kind == 4:
        depth = rng.randrange(1, 9000)
        return (b"[" * depth + b"1" + b"]" * rng.randrange(0, depth + 1)), INVALID
    if kind == 5:
        # Deep nesting under a field this reader does not know (a newer minor's).
        depth = rng.choice([rng.randrange(1, 300), rng.randrange(300, 1200),
                            rng.randrange(1200, 5000)])
        raw = _with_token(data, "zz_nested", "[" * depth + "]" * depth).encode()
        # Deeper, it depends on the recursion limit (which hypothesis raises).
        expected = VALID if depth < 300 else None
        return raw, INVALID if len(raw) > report_mod.MAX_RECORD_BYTES else expected
    if kind == 6:
        pad = rng.randrange(6500, 9000)
        raw = _with_token(data, "zz_pad", json.dumps("x" * pad)).encode()
        return raw, VALID if len(raw) <= report_mod.MAX_RECORD_BYTES else INVALID
    if kind == 7:
        field = rng.choice(FIELDS)
        return (text[:-1] + "," + json.dumps(field) + ":" + json.dumps(data[field])
                + "}").encode(), INVALID
    if kind == 8:
        raw = bytearray(text.encode())
        # The text is ASCII: any of these bytes in it is malformed UTF-8.
        raw[rng.randrange(1, len(raw))] = rng.choice([0x80, 0xC3, 0xFF, 0xED])
        return bytes(raw), INVALID
    if kind == 9:
        return rng.choice([b"[]", b"1", b'"x"', b"null", b"true", b"", b" ", b"[" + text.encode()
                           + b"]"]), INVALID
    if kind == 10:
        token, expected = rng.choice(VERSIONS)
        return _with_token(data, "version", token).encode(), expected
    if kind == 11:
        return _projects(rng, data)
    if kind == 12:
        return reports.make(host + "-other").to_json().encode(), MISPLACED
    if kind == 13:
        raw = bytearray(text.encode())
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        return bytes(raw), None
    if kind == 14:
        return _with_token(data, rng.choice(TEXT_FIELDS), rng.choice(
            ['"\\ud800"', '"ok\\udc80"', '"' + "\\u00e9" * 256 + '"', "5"])).encode(), INVALID
    if kind == 15:
        # Counts and figures past what any reader can do arithmetic with.
        field, token = rng.choice([
            ("vms", str(2 ** 53)), ("heavy_io_vms", "9" * 300), ("epoch", str(10 ** 100)),
            ("latency_inflation_pct", "1e300"), ("latency_inflation_pct", "1000000001"),
            ("ts", "9" * 400), ("cpu_price", "2e308")])
        return _with_token(data, field, token).encode(), INVALID
    return text.encode(), VALID
