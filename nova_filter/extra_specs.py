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

"""Nova API validators for the ``resex:`` flavor extra specs.

Loaded by nova-api through the ``nova.api.extra_spec_validators`` entry point
(``resex = resex_nova.extra_specs``, setup.cfg). Once the ``resex``
namespace is registered, nova also rejects unknown ``resex:`` keys (API
microversion 2.86 and later), so a typo fails at ``openstack flavor set``
instead of silently meaning nothing.

One validator per key of :data:`resex_libvirt.sla.KEYS`, the single source
of the keys' types and ranges: a value the API accepts is a value the agent
accepts. Nova's ``ExtraSpecValidator`` supports only ``int``, ``str`` and
``bool`` values (``nova/api/validation/extra_specs/base.py``): integer keys
use nova's ``int`` checks with the key's min/max, choice keys an ``enum``,
and the float keys a ``str`` with a decimal-number ``pattern``. Every value
is first parsed by the key's own :meth:`~resex_libvirt.sla.Key.parse`, so
that a wrong type, a value out of range or not among the choices is
refused with a message naming the key (``resex:shares='abc': must be an
integer``); nova's check follows, for the spellings the key's parser
tolerates and nova's does not (``BULK``, ``1_000``).
"""

from nova.api.validation.extra_specs import base
from nova import exception

from resex_libvirt import exceptions
from resex_libvirt import sla

#: A decimal number as ``Key.parse`` reads it (no inf/nan, no hex).
NUMBER_PATTERN = r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?"


class SLAKeyValidator(base.ExtraSpecValidator):
    """The key's own check from ``resex_libvirt.sla``, then nova's."""

    def validate(self, name, value):
        try:
            sla.KEYS[name].parse(value)
        except exceptions.SLAError as exc:
            raise exception.ValidationError("Validation failed; %s" % exc) from exc
        super().validate(name, value)


def _value_of(key):
    if key.type is int:
        value = {"type": int}
        if key.min is not None:
            value["min"] = int(key.min)
        if key.max is not None:
            value["max"] = int(key.max)
    elif key.choices:
        value = {"type": str, "enum": list(key.choices)}
    else:
        value = {"type": str, "pattern": NUMBER_PATTERN}
    return value


def _description(key):
    text = key.description
    if key.type is float:
        bounds = []
        if key.min is not None:
            bounds.append(">= %g" % key.min)
        if key.max is not None:
            bounds.append("<= %g" % key.max)
        if bounds:
            text += " A number %s." % " and ".join(bounds)
    if key.default is not None:
        text += " Default: %s." % key.default
    return text


def register():
    """Nova's hook: one validator per ``resex:`` key."""
    return [SLAKeyValidator(name=key.name, description=_description(key), value=_value_of(key))
            for key in sla.KEYS.values()]
