/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/pktbuf.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
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

/* The whole buffer file mapped read-write, as any NF of the chain maps it:
 * whatever it writes here, the other processes see. */
struct Hostile {
  explicit Hostile(const std::string& path) {
    int fd = open(path.c_str(), O_RDWR);
    struct stat st;
    fstat(fd, &st);
    size = static_cast<size_t>(st.st_size);
    base = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  ~Hostile() { munmap(base, size); }
  PktBufHeader* hdr() { return reinterpret_cast<PktBufHeader*>(base); }
  PktDesc* desc(uint64_t i) { return reinterpret_cast<PktDesc*>(base + hdr()->desc_offset) + i; }
  uint8_t* base;
  size_t size;
};

/* A view the NF may use without leaving the packet's slot. */
void ExpectInsideItsSlot(Packet& p) {
  EXPECT_LE(uint32_t{p.headroom()} + p.len() + p.tailroom(), kSlotSize);
}

TEST(PktBuf, HostileDescriptorsAreDroppedAndCounted) {
  std::string path = TempPath("hostile");
  std::string err;
  auto head = PktBuf::Create(path, 8, &err);
  ASSERT_TRUE(head) << err;
  auto next = PktBuf::Open(path, &err);
  ASSERT_TRUE(next) << err;
  uint8_t pkt[64] = {};
  for (int i = 0; i < 6; i++) ASSERT_TRUE(head->Push(pkt, sizeof pkt));
  Hostile evil(path);
  struct Case {
    uint16_t off, len;
    const char* what;
  } cases[] = {
      {kSlotHeadroom, kSlotDataRoom + 1, "length past the slot's end"},
      {kSlotSize + 1, 0, "offset past the slot's end"},
      {0xffff, 2, "offset + length wraps around 16 bits"},
      {2, 0xffff, "length wraps around 16 bits"},
      {kSlotSize - 10, 11, "one byte past the slot"},
  };
  int i = 0;
  for (const Case& c : cases) {
    evil.desc(i)->off = c.off;
    evil.desc(i)->len = c.len;
    Packet p;
    next->View(i, &p);
    EXPECT_TRUE(p.dropped()) << c.what;
    EXPECT_EQ(p.len(), 0) << c.what;
    ExpectInsideItsSlot(p);
    i++;
  }
  evil.desc(i)->seq = 1000; /* a descriptor that is not the ring's i-th */
  Packet stale;
  next->View(i, &stale);
  EXPECT_TRUE(stale.dropped()) << "a descriptor whose sequence number is not its place in the ring";
  EXPECT_EQ(next->bad_descriptors(), 6u) << "each refused descriptor is counted";
  EXPECT_EQ(head->bad_descriptors(), 0u) << "in the process that found it";

  /* The descriptor an honest NF stores after a bad one is sane again. */
  Packet p;
  next->View(0, &p);
  next->Store(0, p, 1);
  Packet again;
  head->View(0, &again);
  EXPECT_TRUE(again.dropped());
  EXPECT_EQ(again.len(), 0);
  ExpectInsideItsSlot(again);
  EXPECT_EQ(head->bad_descriptors(), 0u);
}

TEST(PktBuf, HeaderRewrittenAfterOpenChangesNothing) {
  std::string path = TempPath("hdr");
  std::string err;
  auto head = PktBuf::Create(path, 8, &err);
  ASSERT_TRUE(head) << err;
  auto next = PktBuf::Open(path, &err);
  ASSERT_TRUE(next) << err;
  uint8_t pkt[64] = {7};
  ASSERT_TRUE(head->Push(pkt, sizeof pkt));
  ASSERT_TRUE(head->Push(pkt, sizeof pkt));
  Packet before;
  next->View(1, &before);

  Hostile evil(path);
  evil.hdr()->slot_size = 1u << 30; /* slot i would be far outside the file */
  evil.hdr()->nslots = 1u << 30;
  Packet after;
  next->View(1, &after);
  EXPECT_EQ(after.data(), before.data()) << "the slot's address comes from the header as Open saw it";
  EXPECT_EQ(next->nslots(), 8u);

  /* A head far ahead of the tail claims more packets than there are slots. */
  evil.hdr()->head.store(evil.hdr()->tail.load() + 1000);
  EXPECT_LE(next->used(), 8u);
  EXPECT_FALSE(head->Push(pkt, sizeof pkt)) << "a ring that looks overfull takes nothing";
}

TEST(PktBuf, PushSlotNamesTheSlotThePortFilled) {
  /* Receiving into the chain buffer (issue 33): the ring's descriptors
   * name slots anywhere among nbufs, in any order. */
  std::string path = TempPath("pushslot");
  std::string err;
  auto head = PktBuf::Create(path, 4, &err, 12);
  ASSERT_TRUE(head) << err;
  auto next = PktBuf::Open(path, &err);
  ASSERT_TRUE(next) << err;
  EXPECT_EQ(next->nslots(), 4u);
  EXPECT_EQ(next->nbufs(), 12u);
  for (uint32_t k = 0; k < 12; k++) {
    EXPECT_EQ(head->SlotOf(head->SlotAddr(k)), k);
    EXPECT_EQ(head->SlotOf(head->SlotAddr(k) + kSlotSize - 1), k);
  }
  EXPECT_EQ(head->SlotOf(head->SlotAddr(11) + kSlotSize), -1) << "past the last slot";
  EXPECT_EQ(head->SlotOf(&err), -1);

  const uint32_t slots[] = {11, 3, 7, 0};
  for (uint32_t i = 0; i < 4; i++) {
    uint8_t* s = head->SlotAddr(slots[i]);
    s[kSlotHeadroom] = static_cast<uint8_t>(0xa0 + i);
    uint32_t idx = 99;
    ASSERT_TRUE(head->PushSlot(slots[i], kSlotHeadroom, 60, &idx));
    EXPECT_EQ(idx, i);
  }
  uint32_t idx;
  EXPECT_FALSE(head->PushSlot(5, kSlotHeadroom, 60, &idx)) << "the ring is full";
  head->Release(1);
  EXPECT_FALSE(head->PushSlot(12, kSlotHeadroom, 60, &idx)) << "no slot 12";
  EXPECT_FALSE(head->PushSlot(5, kSlotHeadroom, kSlotDataRoom + 1, &idx)) << "leaves the slot";
  EXPECT_TRUE(head->PushSlot(5, kSlotHeadroom - 8, kSlotDataRoom + 8, &idx)) << "a tag pushed into the headroom";
  for (uint32_t i = 0; i < 3; i++) {
    Packet p;
    ASSERT_TRUE(next->View(i, &p));
    EXPECT_EQ(p.data(), next->SlotAddr(slots[i + 1]) + kSlotHeadroom);
    EXPECT_EQ(p.data()[0], 0xa1 + i);
    ExpectInsideItsSlot(p);
    Packet q;
    EXPECT_TRUE(next->View(i, &q, slots[i + 1]));
    EXPECT_FALSE(next->View(i, &q, slots[i + 1] + 1)) << "the owner expects another slot";
  }
  Packet p;
  ASSERT_TRUE(next->View(3, &p));
  EXPECT_EQ(p.len(), kSlotDataRoom + 8);

  /* A hostile NF names a slot past the file's: dropped, inside a slot. */
  Hostile evil(path);
  evil.desc(0)->slot = 12; /* ring index 0 holds the fourth packet now */
  evil.desc(1)->slot = 0xffffffffu;
  const uint64_t bad = next->bad_descriptors();
  for (uint32_t i : {0u, 3u}) {
    Packet q;
    EXPECT_FALSE(next->View(i, &q));
    EXPECT_TRUE(q.dropped());
    ExpectInsideItsSlot(q);
  }
  EXPECT_EQ(next->bad_descriptors(), bad + 2);
}

TEST(PktBuf, OpenRefusesMoreSlotsThanTheFileHolds) {
  std::string path = TempPath("nbufs");
  std::string err;
  auto head = PktBuf::Create(path, 8, &err, 16);
  ASSERT_TRUE(head) << err;
  Hostile evil(path);
  evil.hdr()->nbufs = static_cast<uint32_t>(evil.size / kSlotSize) + 1;
  EXPECT_FALSE(PktBuf::Open(path, &err));
  EXPECT_NE(err.find("bad header"), std::string::npos) << err;
  evil.hdr()->nbufs = 4; /* fewer slots than descriptors */
  EXPECT_FALSE(PktBuf::Open(path, &err));
  evil.hdr()->nbufs = 16;
  EXPECT_TRUE(PktBuf::Open(path, &err)) << err;
  EXPECT_FALSE(PktBuf::Create(TempPath("huge"), 8, &err, kMaxBufs + 1));
}

}  // namespace
}  // namespace keel
