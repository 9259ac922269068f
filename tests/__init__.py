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

# Every test run starts with nova in native-threading mode (see native_threading).
from tests import native_threading  # noqa: F401

import hypothesis

# Nothing in the tests is timed: on a loaded machine one example may take
# longer than hypothesis' default 200 ms deadline, which is not a failure.
hypothesis.settings.register_profile("resex", deadline=None)
hypothesis.settings.load_profile("resex")
