/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: PktBuf as the NF after a hostile one sees it. Another
 * mapping of the chain's buffer file, as another process has, writes the
 * fuzzer's bytes over the descriptors, the ring's head and tail or the
 * header; View must then give, for every packet, either a dropped empty
 * packet (counted) or one that lies inside its own slot, and Open must
 * refuse a header that does not describe the file. Input: a mode byte, then
 * what that mode writes. With mode bit 1, position 0 enters the packets as
 * a port that received them into the file's slots does (PushSlot, issue 33),
 * in slots the input picks among twice as many as the ring has. */
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "keel/pktbuf.h"

namespace {

using keel::Packet;
using keel::PktBuf;
using keel::PktBufHeader;
using keel::PktDesc;

constexpr uint32_t kSlots = 8;
constexpr uint32_t kBufs = 2 * kSlots;

struct Chain {
  std::string path;
  std::unique_ptr<PktBuf> owner; /* position 0: made the file */
  std::unique_ptr<PktBuf> next;  /* position 1: opened it */
  uint8_t* raw = nullptr;        /* the hostile NF's mapping */
  size_t size = 0;
};

Chain* MakeChain(const char* tag, uint32_t nbufs) {
  auto* c = new Chain;
  c->path = "/dev/shm/keel-fuzz-pktbuf-" + std::string(tag) + std::to_string(getpid());
  unlink(c->path.c_str());
  std::string err;
  c->owner = PktBuf::Create(c->path, kSlots, &err, nbufs);
  if (!c->owner) keel::fuzz::Fail(err.c_str());
  c->next = PktBuf::Open(c->path, &err);
  if (!c->next) keel::fuzz::Fail(err.c_str());
  int fd = open(c->path.c_str(), O_RDWR);
  c->size = static_cast<size_t>(lseek(fd, 0, SEEK_END));
  c->raw = static_cast<uint8_t*>(mmap(nullptr, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  if (c->raw == MAP_FAILED) keel::fuzz::Fail("mmap");
  return c;
}

Chain* TheChain() {
  static Chain* c = MakeChain("", kSlots);
  return c;
}

Chain* TheZeroCopyChain() {
  static Chain* c = MakeChain("zc-", kBufs);
  return c;
}

/* Views every packet the way an in-place NF does and checks each one: its
 * extent inside its slot, every byte read (outside the mapping that faults). */
void ViewAll(PktBuf* b) {
  uint32_t used = b->used();
  KEEL_FUZZ_CHECK(used <= b->nslots());
  for (uint32_t i = 0; i < used; i++) {
    Packet p;
    uint64_t bad = b->bad_descriptors();
    bool ok = b->View(i, &p);
    if (!ok) {
      KEEL_FUZZ_CHECK(p.dropped() && p.len() == 0 && b->bad_descriptors() == bad + 1);
      continue;
    }
    const uint8_t* start = p.data() - p.headroom();
    keel::fuzz::CheckPacket(&p, start, static_cast<uint16_t>(keel::kSlotSize));
    b->Store(i, p, 1);
  }
}

/* Mode 1: a file whose header and size come from the input, opened. */
void HostileHeader(keel::fuzz::Input* in) {
  std::string path = TheChain()->path + "-hdr";
  size_t size = sizeof(PktBufHeader) + (static_cast<size_t>(in->U16()) << 4);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) keel::fuzz::Fail("hostile file");
  alignas(PktBufHeader) uint8_t hdr[sizeof(PktBufHeader)] = {};
  in->Take(hdr, sizeof hdr);
  /* Mostly well-formed headers: the magic and slot size right unless the input says not. */
  if (!(hdr[0] & 1)) {
    PktBufHeader* h = reinterpret_cast<PktBufHeader*>(hdr);
    h->magic = keel::kPktBufMagic;
    h->slot_size = keel::kSlotSize;
  }
  if (pwrite(fd, hdr, sizeof hdr, 0) != static_cast<ssize_t>(sizeof hdr)) keel::fuzz::Fail("pwrite");
  close(fd);
  std::string err;
  std::unique_ptr<PktBuf> b = PktBuf::Open(path, &err);
  if (b) {
    ViewAll(b.get());
  } else {
    KEEL_FUZZ_CHECK(!err.empty());
  }
  unlink(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  keel::fuzz::Input in(data, size);
  uint8_t mode = in.U8();
  if (mode & 1) {
    HostileHeader(&in);
    return 0;
  }
  const bool zero_copy = mode & 2;
  Chain* c = zero_copy ? TheZeroCopyChain() : TheChain();
  /* An empty ring, whatever the last input left in head and tail. */
  auto* wh = reinterpret_cast<PktBufHeader*>(c->raw);
  wh->tail.store(0);
  wh->head.store(0);
  /* Position 0 copies a few packets in. */
  uint8_t npkts = in.U8() % (kSlots + 1);
  for (uint8_t k = 0; k < npkts; k++) {
    uint8_t frame[keel::kSlotDataRoom];
    uint16_t len = static_cast<uint16_t>(in.U16() % (keel::kSlotDataRoom + 64));
    size_t got = in.Take(frame, len < keel::kSlotDataRoom ? len : keel::kSlotDataRoom);
    if (zero_copy) {
      /* The port wrote the frame at the headroom of the slot it chose. */
      uint32_t slot = in.U8() % kBufs, idx = 0;
      uint16_t n = len < keel::kSlotDataRoom ? len : keel::kSlotDataRoom;
      std::memcpy(c->owner->SlotAddr(slot) + keel::kSlotHeadroom, frame, got < n ? got : n);
      KEEL_FUZZ_CHECK(c->owner->PushSlot(slot, keel::kSlotHeadroom, n, &idx));
      KEEL_FUZZ_CHECK(c->next->desc(k).slot == slot && idx == k);
    } else {
      bool pushed = c->owner->Push(frame, len);
      KEEL_FUZZ_CHECK(pushed == (len <= keel::kSlotDataRoom));
    }
    (void)got;
  }
  /* The hostile NF writes over descriptors, then maybe head and tail. */
  const PktBufHeader* h = reinterpret_cast<const PktBufHeader*>(c->raw);
  uint8_t* descs = c->raw + h->desc_offset;
  size_t ring = kSlots * sizeof(PktDesc);
  while (in.left() >= 3) {
    uint8_t what = in.U8();
    if (what == 0xff) {
      uint64_t head, tail;
      in.Take(reinterpret_cast<uint8_t*>(&head), sizeof head);
      in.Take(reinterpret_cast<uint8_t*>(&tail), sizeof tail);
      wh->head.store(head);
      wh->tail.store(tail);
      continue;
    }
    uint16_t at = static_cast<uint16_t>(in.U16() % ring);
    descs[at] = what;
  }
  ViewAll(c->next.get());
  return 0;
}
