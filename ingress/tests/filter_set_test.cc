/* SPDX-License-Identifier: Apache-2.0 */
#include "filter_set.h"

#include <gtest/gtest.h>

#include "frames.h"

namespace keel::ingress {
namespace {

int Match(const FilterSet& fs, const std::vector<uint8_t>& f) {
  return fs.Match(f.data(), static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size()));
}

TEST(FilterSet, FirstChainInNameOrderWins) {
  std::vector<std::string> errors;
  FilterSet fs({{"b-web", "tcp dst port 80"}, {"a-any-tcp", "tcp"}, {"c-udp", "udp and dst port 5001"}}, &errors);
  ASSERT_TRUE(errors.empty());
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs.Name(Match(fs, testing::Ipv4Frame(6, 1, 80))), "a-any-tcp");
  EXPECT_EQ(fs.Name(Match(fs, testing::UdpFrame(1, 5001))), "c-udp");
  EXPECT_EQ(Match(fs, testing::UdpFrame(1, 53)), -1);
}

TEST(FilterSet, BadFilterIsLeftOutAndNamed) {
  std::vector<std::string> errors;
  FilterSet fs({{"bad", "udp and and"}, {"good", "src net 198.18.0.0/15"}}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("chain bad"), std::string::npos);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs.Name(Match(fs, testing::UdpFrame(9))), "good");
}

}  // namespace
}  // namespace keel::ingress
