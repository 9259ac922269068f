"""Link capacity from the kernel's ``rate`` text, MTUs, overrides."""

import unittest

from resex_libvirt import exceptions
from resex_libvirt.fabric import link_facts


class TestParseRate(unittest.TestCase):

    def data_gbps(self, text):
        return link_facts.parse_rate(text).data_gbps

    def test_8b10b_generations_lose_a_fifth(self):
        self.assertAlmostEqual(2.0, self.data_gbps("2.5 Gb/sec (1X SDR)"))
        self.assertAlmostEqual(16.0, self.data_gbps("20 Gb/sec (4X DDR)"))
        self.assertAlmostEqual(32.0, self.data_gbps("40 Gb/sec (4X QDR)"))

    def test_paper_link_is_8_gbps_of_data_i_e_1_gigabyte_per_second(self):
        # Section VI-B2: "8Gbps (due to the 8b/10b IB encoding) i.e. 1 Gigabyte per second".
        rate = link_facts.parse_rate("10 Gb/sec (4X SDR)")
        self.assertAlmostEqual(8.0, rate.data_gbps)
        self.assertAlmostEqual(1e9, rate.data_bytes_per_s)

    def test_old_kernels_print_sdr_without_a_name(self):
        rate = link_facts.parse_rate("10 Gb/sec (4X)")
        self.assertEqual("SDR", rate.speed)
        self.assertAlmostEqual(8.0, rate.data_gbps)

    def test_64b66b_generations_use_their_lane_data_rates(self):
        self.assertAlmostEqual(40.0, self.data_gbps("40 Gb/sec (4X FDR10)"))
        self.assertAlmostEqual(54.545, self.data_gbps("56 Gb/sec (4X FDR)"), places=2)
        self.assertAlmostEqual(100.0, self.data_gbps("100 Gb/sec (4X EDR)"))
        self.assertAlmostEqual(25.0, self.data_gbps("25 Gb/sec (1X EDR)"))
        self.assertAlmostEqual(200.0, self.data_gbps("200 Gb/sec (4X HDR)"))
        self.assertAlmostEqual(400.0, self.data_gbps("400 Gb/sec (4X NDR)"))
        self.assertAlmostEqual(2400.0, self.data_gbps("2400 Gb/sec (12X XDR)"))

    def test_unknown_speed_names_fall_back_on_the_lane_rate(self):
        self.assertAlmostEqual(8.0, self.data_gbps("10 Gb/sec (4X ZZZ)"))
        self.assertAlmostEqual(800 * 64 / 66, self.data_gbps("800 Gb/sec (4X GDR)"))

    def test_text_that_is_not_a_rate_is_a_fabric_error(self):
        for text in ("", "fast", "100 Gb/sec", "100 Gb/sec (0X EDR)", None):
            self.assertRaises(exceptions.FabricError, link_facts.parse_rate, text)


class TestMTU(unittest.TestCase):

    def test_ipoib_datagram_mtu_is_the_ib_mtu_minus_4(self):
        self.assertEqual(2048, link_facts.ib_mtu_from_ipoib(2044))
        self.assertEqual(4096, link_facts.ib_mtu_from_ipoib(4092))

    def test_ipoib_connected_mode_says_nothing_about_the_ib_mtu(self):
        self.assertIsNone(link_facts.ib_mtu_from_ipoib(65520))
        self.assertIsNone(link_facts.ib_mtu_from_ipoib(None))


class TestBuildLink(unittest.TestCase):

    def test_overrides_win_then_rate_then_fallback(self):
        rate = link_facts.parse_rate("40 Gb/sec (4X QDR)")
        over = link_facts.LinkOverrides(capacity_gbps=8.0, mtu=2048)
        self.assertEqual((1e9, 2048), self._facts(link_facts.build_link("l", over, rate=rate)))
        self.assertEqual((4e9, 1024), self._facts(link_facts.build_link("l", None, rate=rate)))
        self.assertEqual((5.0, 1500), self._facts(link_facts.build_link(
            "l", None, mtu=1500, fallback_bytes_per_s=5.0)))

    def test_unknown_capacity_asks_the_operator(self):
        self.assertRaises(exceptions.FabricError, link_facts.build_link, "l", None)

    def test_bytes_become_mtus_rounding_partial_packets_up(self):
        link = link_facts.build_link("l", link_facts.LinkOverrides(8.0, 1024))
        self.assertEqual(1048576, link.mtus(2**30))
        self.assertEqual(2, link.mtus(1025))

    @staticmethod
    def _facts(link):
        return link.capacity_bytes_per_s, link.mtu
