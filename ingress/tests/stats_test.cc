/* SPDX-License-Identifier: Apache-2.0 */
#include "stats.h"

#include <gtest/gtest.h>

namespace keel::ingress {
namespace {

TEST(Stats, PrometheusNamesAndHistogram) {
  IngressCounters c;
  c.packets_in.Add(5);
  c.drops[static_cast<size_t>(DropReason::kBufferFull)].Add(2);
  c.install_latency.Observe(300'000);    /* 0.3 ms */
  c.install_latency.Observe(3'000'000);  /* 3 ms */
  std::string t = PrometheusText(TakeSnapshot(c));
  EXPECT_NE(t.find("keel_ingress_packets_in_total 5\n"), std::string::npos);
  EXPECT_NE(t.find("keel_ingress_drops_total{reason=\"buffer_full\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("keel_ingress_install_latency_seconds_bucket{le=\"0.0005\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("keel_ingress_install_latency_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("keel_ingress_install_latency_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(t.find("keel_ingress_hold_latency_seconds_count 0\n"), std::string::npos);
}

TEST(Stats, HoldAndInstallAreSeparateHistograms) {
  IngressCounters c;
  c.hold_latency.Observe(200'000);       /* 0.2 ms */
  c.install_latency.Observe(4'000'000);  /* 4 ms */
  Snapshot s = TakeSnapshot(c);
  EXPECT_LE(s.hold.QuantileMs(0.99), 0.25);
  EXPECT_GT(s.install.QuantileMs(0.99), 2.5);
  std::string j = StatsJson(s, "ingress-0");
  EXPECT_NE(j.find("\"hold_count\": 1"), std::string::npos);
  EXPECT_NE(j.find("\"install_count\": 1"), std::string::npos);
}

TEST(Stats, MovesAreCountedByOutcomeWithThePauseOfTheMovedOnes) {
  IngressCounters c;
  c.moves[static_cast<size_t>(MoveFailure::kNone)].Add(3);
  c.moves[static_cast<size_t>(MoveFailure::kTimeout)].Add(1);
  c.move_pause.Observe(20'000'000); /* 20 ms */
  Snapshot s = TakeSnapshot(c);
  std::string t = PrometheusText(s);
  EXPECT_NE(t.find("keel_ingress_flow_moves_total{result=\"moved\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("keel_ingress_flow_moves_total{result=\"timeout\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("keel_ingress_flow_moves_total{result=\"no_room\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("keel_ingress_move_pause_seconds_count 1\n"), std::string::npos);
  std::string j = StatsJson(s, "ingress-0");
  EXPECT_NE(j.find("\"moved\": 3"), std::string::npos);
  EXPECT_NE(j.find("\"move_pause_count\": 1"), std::string::npos);
}

TEST(Stats, QuantilesComeFromTheBuckets) {
  IngressCounters c;
  for (int i = 0; i < 99; i++) c.install_latency.Observe(800'000);  /* (0.5, 1] ms */
  c.install_latency.Observe(40'000'000);                             /* (25, 50] ms */
  Snapshot s = TakeSnapshot(c);
  EXPECT_GT(s.install.QuantileMs(0.5), 0.5);
  EXPECT_LE(s.install.QuantileMs(0.5), 1.0);
  EXPECT_LE(s.install.QuantileMs(0.99), 1.0);
  EXPECT_GT(s.install.QuantileMs(1.0), 25.0);
  EXPECT_EQ(TakeSnapshot(IngressCounters()).install.QuantileMs(0.99), 0.0);
}

}  // namespace
}  // namespace keel::ingress
