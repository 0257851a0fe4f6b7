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
}

TEST(Stats, QuantilesComeFromTheBuckets) {
  IngressCounters c;
  for (int i = 0; i < 99; i++) c.install_latency.Observe(800'000);  /* (0.5, 1] ms */
  c.install_latency.Observe(40'000'000);                             /* (25, 50] ms */
  Snapshot s = TakeSnapshot(c);
  EXPECT_GT(s.InstallQuantileMs(0.5), 0.5);
  EXPECT_LE(s.InstallQuantileMs(0.5), 1.0);
  EXPECT_LE(s.InstallQuantileMs(0.99), 1.0);
  EXPECT_GT(s.InstallQuantileMs(1.0), 25.0);
  EXPECT_EQ(TakeSnapshot(IngressCounters()).InstallQuantileMs(0.99), 0.0);
}

}  // namespace
}  // namespace keel::ingress
