"""The shared control step: the deadband rule."""

import unittest

from resex_libvirt import control


class MovedTest(unittest.TestCase):

    def test_a_small_change_is_held_back_by_the_deadband(self):
        self.assertFalse(control.moved((50.0, 256), (50.5, 256), 1.0))
        self.assertTrue(control.moved((50.0, 256), (49.0, 256), 1.0))

    def test_without_a_deadband_any_change_but_no_change_is_written(self):
        self.assertTrue(control.moved((50.0, 256), (50.01, 256), 0.0))
        self.assertFalse(control.moved((50.0, 256), (50.0, 256), 0.0))

    def test_to_or_from_uncapped_and_weight_changes_always_count(self):
        self.assertTrue(control.moved((99.5, 256), (None, 256), 5.0))
        self.assertTrue(control.moved((None, 256), (99.5, 256), 5.0))
        self.assertTrue(control.moved((None, 256), (None, 512), 5.0))
        self.assertFalse(control.moved((None, 256), (None, 256), 5.0))
