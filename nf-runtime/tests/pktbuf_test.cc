/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/pktbuf.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace keel {
namespace {

std::string TempPath(const char* what) {
  return "/dev/shm/keel-test-" + std::string(what) + "-" + std::to_string(getpid());
}

TEST(PktBuf, FileIsPrivateToItsOwnerAndRemovedWithIt) {
  std::string path = TempPath("perm");
  std::string err;
  {
    auto b = PktBuf::Create(path, 100, &err);
    ASSERT_TRUE(b) << err;
    EXPECT_EQ(b->nslots(), 128u);
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_FALSE(PktBuf::Create(path, 8, &err)) << "a second instance must not take the file";
    EXPECT_NE(err.find("File exists"), std::string::npos) << err;
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST(PktBuf, SecondMappingSeesPacketsAndChangesInPlace) {
  std::string path = TempPath("share");
  std::string err;
  auto first = PktBuf::Create(path, 8, &err);
  ASSERT_TRUE(first) << err;
  auto other = PktBuf::Open(path, &err); /* as NF 2 maps it in its process */
  ASSERT_TRUE(other) << err;

  std::vector<uint8_t> pkt(60);
  for (size_t i = 0; i < pkt.size(); i++) pkt[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(first->Push(pkt.data(), 60));
  ASSERT_TRUE(first->Push(pkt.data(), 30));
  ASSERT_EQ(other->used(), 2u);

  Packet p;
  other->View(0, &p);
  ASSERT_EQ(p.len(), 60);
  EXPECT_EQ(std::memcmp(p.data(), pkt.data(), 60), 0);
  EXPECT_EQ(p.headroom(), kSlotHeadroom);
  ASSERT_TRUE(p.Prepend(4));
  p.data()[0] = 0xab;
  other->Store(0, p, 1);
  Packet q;
  other->View(1, &q);
  q.Drop();
  other->Store(1, q, 1);

  Packet seen;
  first->View(0, &seen);
  EXPECT_EQ(seen.len(), 64);
  EXPECT_EQ(seen.data()[0], 0xab);
  EXPECT_EQ(first->desc(0).stage, 1);
  first->View(1, &seen);
  EXPECT_TRUE(seen.dropped());
  EXPECT_EQ(first->desc(1).seq, 1u);

  other->Release(2);
  EXPECT_EQ(first->used(), 0u);
}

TEST(PktBuf, RefusesWhenFullOrTooBig) {
  std::string path = TempPath("full");
  std::string err;
  auto b = PktBuf::Create(path, 4, &err);
  ASSERT_TRUE(b) << err;
  std::vector<uint8_t> pkt(kSlotDataRoom + 1);
  EXPECT_FALSE(b->Push(pkt.data(), static_cast<uint16_t>(pkt.size())));
  for (int i = 0; i < 4; i++) EXPECT_TRUE(b->Push(pkt.data(), 64));
  EXPECT_FALSE(b->Push(pkt.data(), 64));
  b->Release(1);
  EXPECT_TRUE(b->Push(pkt.data(), 64));
}

TEST(PktBuf, RewindRefillsFromTheFirstSlotOnlyWhenEmpty) {
  std::string path = TempPath("rewind");
  std::string err;
  auto b = PktBuf::Create(path, 8, &err);
  ASSERT_TRUE(b) << err;
  uint8_t pkt[64] = {1};
  Packet first, later;
  for (int i = 0; i < 3; i++) ASSERT_TRUE(b->Push(pkt, sizeof pkt));
  b->View(0, &first);
  b->Release(2);
  b->Rewind(); /* one packet is still in flight: nothing moves */
  ASSERT_EQ(b->used(), 1u);
  EXPECT_EQ(b->desc(0).seq, 2u);
  b->Release(1);
  b->Rewind();
  ASSERT_TRUE(b->Push(pkt, sizeof pkt));
  b->View(0, &later);
  EXPECT_EQ(later.data(), first.data()) << "the next turn reuses the first slot";
  EXPECT_EQ(b->used(), 1u);
}

TEST(PktBuf, OpenRejectsFilesThatAreNotBuffers) {
  std::string path = TempPath("junk");
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_TRUE(f);
  std::vector<char> junk(8192, 'x');
  std::fwrite(junk.data(), 1, junk.size(), f);
  std::fclose(f);
  std::string err;
  EXPECT_FALSE(PktBuf::Open(path, &err));
  EXPECT_NE(err.find("not a keel packet buffer"), std::string::npos) << err;
  unlink(path.c_str());
  EXPECT_FALSE(PktBuf::Open(path, &err));
}

}  // namespace
}  // namespace keel
