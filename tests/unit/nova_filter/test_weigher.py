"""ResExCongestionWeigher through nova's own HostWeightHandler, on real nova objects."""

from nova.scheduler import weights

from nova_filter import weigher as resex_weigher
from tests.unit.nova_filter import base


class CongestionWeigherTest(base.PluginTestCase):

    def setUp(self):
        super().setUp()
        self.handler = weights.HostWeightHandler()
        # Raw weights for a sensitive request, 100 / (100 + CI):
        # h1 CI 100 -> 0.5, h2 CI 0 -> 1.0, h3 CI 300 (rho .75) -> 0.25.
        self.publish(h1=dict(link_utilisation=0.5, sensitive_vms=1),
                     h2=dict(link_utilisation=0.0, sensitive_vms=3),
                     h3=dict(link_utilisation=0.75, sensitive_vms=0))

    def weighed(self, spec, hosts=("h1", "h2", "h3"), **aggregates):
        states = [base.host(h, **aggregates.get(h, {})) for h in hosts]
        out = self.handler.get_weighed_objects(
            [resex_weigher.ResExCongestionWeigher()], states, spec)
        return [(w.obj.host, round(w.weight, 6)) for w in out]

    def test_a_sensitive_request_prefers_the_least_congested_host(self):
        # Normalised (min 0.25, max 1.0): h2 1.0, h1 (0.5-0.25)/0.75 = 1/3, h3 0.
        self.assertEqual([("h2", 1.0), ("h1", 0.333333), ("h3", 0.0)],
                         self.weighed(base.request(**base.SENSITIVE)))

    def test_a_bulk_request_prefers_hosts_without_sensitive_tenants(self):
        # Raw 1 / (1 + n): h3 1.0, h1 0.5, h2 0.25.
        self.assertEqual([("h3", 1.0), ("h1", 0.333333), ("h2", 0.0)],
                         self.weighed(base.request(**base.BULK)))

    def test_other_requests_weigh_the_same_everywhere(self):
        self.assertEqual({0.0}, {w for _, w in self.weighed(base.request())})

    def test_an_unknown_host_gets_the_mean_weight_under_pass(self):
        # Known raw: h2 1.0, h3 0.25; unknown gets their mean 0.625 -> normalised 0.5.
        self.assertEqual([("h2", 1.0), ("unknown", 0.5), ("h3", 0.0)],
                         self.weighed(base.request(**base.SENSITIVE),
                                      hosts=("h2", "unknown", "h3")))

    def test_an_unknown_host_gets_the_lowest_weight_under_fail(self):
        self.conf.config(unknown_host_policy="fail", group="resex")
        self.assertEqual([("h2", 1.0), ("h3", 0.25), ("unknown", 0.0)],
                         self.weighed(base.request(**base.SENSITIVE),
                                      hosts=("h2", "unknown", "h3")))

    def test_the_multiplier_comes_from_conf_and_aggregates(self):
        self.conf.config(weight_multiplier=3.0, group="resex")
        self.assertEqual([("h2", 3.0), ("h1", 1.0), ("h3", 0.0)],
                         self.weighed(base.request(**base.SENSITIVE)))
        self.assertEqual([("h1", 1.0), ("h3", 0.0), ("h2", -2.0)],
                         self.weighed(base.request(**base.SENSITIVE),
                                      h2={"resex_weight_multiplier": "-2"}))

    def test_weigh_object_alone_matches_the_raw_weights(self):
        w = resex_weigher.ResExCongestionWeigher()
        spec = base.request(**base.SENSITIVE)
        self.assertEqual(0.5, w._weigh_object(base.host("h1"), spec))
        self.assertEqual(resex_weigher.NEUTRAL, w._weigh_object(base.host("nope"), spec))
        self.assertEqual(0.0, w._weigh_object(base.host("h1"), base.request()))
