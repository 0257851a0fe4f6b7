/* SPDX-License-Identifier: Apache-2.0 */
#include "assign_batch.h"

#include <gtest/gtest.h>

#include <set>

namespace keel::ingress {
namespace {

constexpr uint64_t kMs = 1'000'000;

PendingFlow FlowN(uint32_t n) {
  PendingFlow f;
  f.key.src_ip = 0xC6120001;
  f.key.dst_ip = 0xC6120301;
  f.key.src_port = static_cast<uint16_t>(1024 + n);
  f.key.dst_port = 5001;
  f.key.proto = 17;
  f.req_id = n + 1;
  f.chain = "chain3";
  return f;
}

AssignBatchConfig Config() {
  AssignBatchConfig c;
  c.max_flows = 4;
  c.window_ns = 1 * kMs;
  c.max_attempts = 3;
  c.patience_ns = 500 * kMs;
  return c;
}

TEST(AssignBatcher, FlowAfterAQuietWindowGoesAtOnce) {
  AssignBatcher b(Config());
  const uint64_t t0 = 1000 * kMs;
  b.Add(FlowN(0), t0);  /* the first flow ever */
  ASSERT_TRUE(b.Due(t0));
  std::vector<PendingFlow> late;
  ASSERT_EQ(b.Take(t0, 64, &late).size(), 1u);
  /* a window later: new flows are rare, no batch to wait for */
  b.Add(FlowN(1), t0 + kMs);
  ASSERT_TRUE(b.Due(t0 + kMs));
  ASSERT_EQ(b.Take(t0 + kMs, 64, &late).size(), 1u);
  /* right after that batch: this one waits a window for others */
  b.Add(FlowN(2), t0 + kMs + kMs / 4);
  EXPECT_FALSE(b.Due(t0 + kMs + kMs / 4));
  EXPECT_EQ(b.Deadline(), t0 + 2 * kMs + kMs / 4);
}

TEST(AssignBatcher, BelowTheBusyRateAFlowGoesAtOnceAboveItWaitsTheWindow) {
  AssignBatchConfig c = Config();
  c.window_ns = 5 * kMs;
  c.busy_rate = 200;
  AssignBatcher b(c);
  std::vector<PendingFlow> late;
  uint64_t t = 1000 * kMs;
  uint32_t n = 0;
  /* three flows in the same millisecond, once a second: each goes at once */
  for (int round = 0; round < 3; round++, t += 1000 * kMs) {
    for (int i = 0; i < 3; i++) {
      b.Add(FlowN(n++), t + i * kMs / 10);
      ASSERT_TRUE(b.Due(t + i * kMs / 10)) << round << " " << i;
      ASSERT_EQ(b.Take(t + i * kMs / 10, 64, &late).size(), 1u);
    }
  }
  /* then a flow every 2 ms (500 a second): once the rate counted over the last
   * ~100 ms passes 200 a second (the 25th or so), flows wait for others */
  int waited = 0, first_wait = -1;
  size_t taken = 0;
  for (int i = 0; i < 60; i++, t += 2 * kMs) {
    if (b.Due(t)) taken += b.Take(t, 64, &late).size();
    b.Add(FlowN(n++), t);
    if (b.Due(t)) {
      taken += b.Take(t, 64, &late).size();
      continue;
    }
    waited++;
    if (first_wait < 0) {
      first_wait = i;
      EXPECT_EQ(b.Deadline(), t + 5 * kMs);
    }
  }
  EXPECT_GT(first_wait, 15);
  EXPECT_LT(first_wait, 35);
  EXPECT_GT(waited, 25);
  EXPECT_EQ(taken + b.waiting(), 60u);
  EXPECT_TRUE(late.empty());
}

TEST(AssignBatcher, PartialBatchGoesWhenItsFirstFlowWaitedTheWindow) {
  AssignBatcher b(Config());
  const uint64_t t0 = 1000 * kMs;
  EXPECT_EQ(b.Deadline(), 0u);
  std::vector<PendingFlow> late;
  b.Add(FlowN(99), t0 - kMs / 2);  /* a batch just went: the next flows wait the window */
  b.Take(t0 - kMs / 2, 64, &late);
  b.Add(FlowN(0), t0);
  b.Add(FlowN(1), t0 + kMs / 2);
  EXPECT_EQ(b.Deadline(), t0 + kMs);  /* the first flow's window, not the second's */
  EXPECT_FALSE(b.Due(t0 + kMs - 1));
  ASSERT_TRUE(b.Due(t0 + kMs));
  auto batch = b.Take(t0 + kMs, 64, &late);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].req_id, 1u);
  EXPECT_EQ(batch[1].req_id, 2u);
  EXPECT_EQ(batch[0].attempt, 1);
  EXPECT_TRUE(late.empty());
  EXPECT_EQ(b.Deadline(), 0u);
  /* the next flow, a moment later, opens a new window of its own */
  b.Add(FlowN(2), t0 + kMs + kMs / 2);
  EXPECT_FALSE(b.Due(t0 + kMs + kMs / 2));
  EXPECT_TRUE(b.Due(t0 + 2 * kMs + kMs / 2));
}

TEST(AssignBatcher, FullBatchGoesAtOnceAndTheRestFollowsInOrder) {
  AssignBatcher b(Config());
  const uint64_t t0 = 1000 * kMs;
  for (uint32_t i = 0; i < 6; i++) b.Add(FlowN(i), t0);
  ASSERT_TRUE(b.Due(t0));
  std::vector<PendingFlow> late;
  auto first = b.Take(t0, 64, &late);
  ASSERT_EQ(first.size(), 4u);
  /* room for one flow only (the others' calls take the rest) */
  auto one = b.Take(t0, 1, &late);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].req_id, 5u);
  /* the two left over do not wait another window */
  ASSERT_TRUE(b.Due(t0));
  auto second = b.Take(t0, 64, &late);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].req_id, 6u);
  EXPECT_EQ(b.waiting(), 0u);
}

TEST(AssignBatcher, FailedBatchIsRetriedOnceEachUntilItsAttemptsAreUsed) {
  AssignBatcher b(Config());
  const uint64_t t0 = 1000 * kMs;
  for (uint32_t i = 0; i < 3; i++) b.Add(FlowN(i), t0);
  std::vector<PendingFlow> late;
  auto batch = b.Take(t0 + kMs, 64, &late);
  b.Add(FlowN(9), t0 + 2 * kMs);  /* a new flow meanwhile */
  /* the call failed (deadline): every flow goes again, ahead of the new one, at once */
  for (auto& f : batch) EXPECT_TRUE(b.Retry(f, t0 + 2 * kMs));
  ASSERT_TRUE(b.Due(t0 + 2 * kMs));
  auto again = b.Take(t0 + 2 * kMs, 64, &late);
  ASSERT_EQ(again.size(), 4u);
  std::set<uint64_t> ids;
  for (size_t i = 0; i < 3; i++) {
    EXPECT_EQ(again[i].attempt, 2) << i;
    ids.insert(again[i].req_id);
  }
  EXPECT_EQ(ids.size(), 3u) << "a retried flow went twice into one batch";
  EXPECT_EQ(again[3].req_id, 10u);
  EXPECT_EQ(again[3].attempt, 1);
  /* the third call is the last */
  EXPECT_TRUE(b.Retry(again[0], t0 + 3 * kMs));
  auto third = b.Take(t0 + 3 * kMs, 64, &late);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].attempt, 3);
  EXPECT_FALSE(b.Retry(third[0], t0 + 4 * kMs));
  EXPECT_EQ(b.waiting(), 0u);
}

TEST(AssignBatcher, FlowThatOutwaitedItsPatienceIsHandedBackLate) {
  AssignBatcher b(Config());
  const uint64_t t0 = 1000 * kMs;
  b.Add(FlowN(0), t0);
  b.Add(FlowN(1), t0 + 400 * kMs);
  std::vector<PendingFlow> late;
  auto batch = b.Take(t0 + 501 * kMs, 64, &late);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].req_id, 1u);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].req_id, 2u);
}

}  // namespace
}  // namespace keel::ingress
