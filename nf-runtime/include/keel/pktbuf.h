/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-chain shared packet buffer (Galleon §4.2 "Memory", §4.4).
 *
 * One file per chain instance (under /dev/shm or /dev/hugepages) holds a
 * header, a ring of packet descriptors and fixed-size packet slots. The first
 * NF of a chain copies each received burst into it (the spatial-isolation
 * copy); the NFs after it map the same file and work on the slots in place.
 * Everything in the file is addressed by index, never by pointer, so each
 * process may map it at a different address.
 *
 * Layout: [PktBufHeader | PktDesc x nslots | slot x nbufs], nslots a power
 * of two and nbufs >= nslots. Descriptor i of the ring lives at index
 * (seq & (nslots - 1)) and names the slot its packet is in. The copying
 * first NF (Push, keel-nf --rx-copy) always uses the slot of the
 * descriptor's own index. Receiving without a copy (B5, rx_pool.h), the
 * port's mempool hands out every one of the nbufs slots (the extra ones
 * cover what the port's RX and TX rings hold), the NIC writes each packet
 * into one, and the first NF only names it in the descriptor (PushSlot).
 *
 * Every NF of the chain maps the file read-write, so no process trusts what
 * another wrote there: the geometry (nslots, slot_size) is read once, when
 * the file is created or opened, and each descriptor is checked against it
 * before a packet is viewed (Galleon §4.4: an NF's bug or malice stays in its
 * own packets).
 */
#ifndef KEEL_PKTBUF_H_
#define KEEL_PKTBUF_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "keel/chain_sched.h"
#include "keel/monitor.h"
#include "keel/packet.h"

namespace keel {

constexpr uint16_t kSlotHeadroom = 128;
constexpr uint16_t kSlotDataRoom = 2048;
constexpr uint32_t kSlotSize = kSlotHeadroom + kSlotDataRoom;
constexpr uint32_t kMaxBufs = 1u << 20;
constexpr uint64_t kPktBufMagic = 0x6b65656c70627532ull; /* "keelpbu2": descriptors name their slot */

/* 16 bytes: four descriptors to a cache line. */
struct PktDesc {
  uint16_t off;     /* start of the packet inside its slot */
  uint16_t len;
  uint16_t flags;   /* kDescDrop, kDescMove */
  uint16_t stage;   /* position of the last NF that finished this packet */
  uint32_t seq;     /* ring sequence number of the packet, its low 32 bits */
  uint32_t slot;    /* the slot the packet is in, < nbufs */
};
static_assert(sizeof(PktDesc) == 16, "four descriptors a cache line");
constexpr uint16_t kDescDrop = 1;
/* The packet is a flow move's control frame (inband.h types 2, 3): each
 * position runs MoveAt on it instead of its NF (engine.h). Set by position
 * 0 as it enters the frame (MarkMove), kept by StoreMove. */
constexpr uint16_t kDescMove = 2;

/* The file's first bytes; the scheduling words follow at KEEL_SCHED_OFFSET. */
struct PktBufHeader {
  uint64_t magic;
  uint32_t nslots; /* descriptors in the ring */
  uint32_t slot_size;
  uint32_t nbufs;  /* slots in the file, nslots or more */
  uint64_t desc_offset;
  uint64_t slot_offset;
  alignas(64) std::atomic<uint64_t> head; /* next sequence the first NF fills */
  /* Move frames (kDescMove) the first NF entered since the egress last
   * emptied the ring: while 0, the other positions need not look for them. */
  std::atomic<uint32_t> moves;
  alignas(64) std::atomic<uint64_t> tail; /* next sequence the egress sends */
};

static_assert(sizeof(PktBufHeader) <= KEEL_SCHED_OFFSET &&
                  KEEL_SCHED_OFFSET + sizeof(keel_chain_sched) <= 4096,
              "the header and the scheduling words share the file's first page");

class PktBuf {
 public:
  /* Creates |path| (mode 0600, failing if it exists) with a ring of
   * |nslots| descriptors (rounded up to a power of two) and |nbufs| slots
   * (at least the ring's), and maps it. Returns nullptr and sets |*err| on
   * failure. */
  static std::unique_ptr<PktBuf> Create(const std::string& path, uint32_t nslots, std::string* err,
                                        uint32_t nbufs = 0);
  /* Maps an existing buffer created by Create. */
  static std::unique_ptr<PktBuf> Open(const std::string& path, std::string* err);
  ~PktBuf();

  uint32_t nslots() const { return nslots_; }
  /* Slots in the file (rx_pool.h gives each to one mbuf). */
  uint32_t nbufs() const { return nbufs_; }
  /* Slot |k|'s first byte (k < nbufs()), and the index of the slot that
   * holds |addr|, or -1 if no slot does. */
  uint8_t* SlotAddr(uint32_t k) { return slots_ + size_t{k} * kSlotSize; }
  int64_t SlotOf(const void* addr) const {
    const uint8_t* a = static_cast<const uint8_t*>(addr);
    if (a < slots_ || a >= slots_ + size_t{nbufs_} * kSlotSize) return -1;
    return static_cast<int64_t>(static_cast<size_t>(a - slots_) / kSlotSize);
  }
  /* Packets copied in and not yet released; never more than nslots(),
   * whatever another process wrote into the ring's head and tail. */
  uint32_t used() const;
  uint32_t free_slots() const { return nslots() - used(); }

  /* Copies |len| bytes into the next slot; false if the ring is full or the
   * packet does not fit a slot. This is the first NF's isolation copy. */
  bool Push(const uint8_t* data, uint16_t len);
  /* Enters the packet at |off|, |len| bytes, of slot |slot| (< nbufs()),
   * where the port received it, without a copy; false if the ring is full.
   * |*ring_index| gets the descriptor's index, for the first NF's own
   * record of which buffer it lent the chain. */
  bool PushSlot(uint32_t slot, uint16_t off, uint16_t len, uint32_t* ring_index);
  /* Starts loading the |i|-th packet's descriptor into the cache, and the
   * first bytes of the packet |kSlotLag| places behind it, whose descriptor
   * an earlier call loaded (l3fwd style, a few packets ahead of View). */
  static constexpr uint32_t kSlotLag = 4;
  void Prefetch(uint32_t i) {
    uint64_t seq = tail() + i;
    __builtin_prefetch(&descs_[seq & mask_]);
    if (i >= kSlotLag) {
      uint32_t s = descs_[(seq - kSlotLag) & mask_].slot;
      if (s < nbufs_) __builtin_prefetch(SlotAddr(s) + kSlotHeadroom);
    }
  }
  /* Points |p| at the |i|-th packet after the tail (0 <= i < used()).
   * A descriptor that is not the ring's i-th, that names no slot (or, with
   * |expect_slot|, another slot than that), whose extent leaves its slot
   * or whose packet starts at an odd offset gives an empty, dropped packet,
   * counted in bad_descriptors(); returns false then. */
  bool View(uint32_t i, Packet* p, uint32_t expect_slot = kAnySlot);
  static constexpr uint32_t kAnySlot = UINT32_MAX;
  /* Records |p|'s current extent and drop mark in the |i|-th descriptor. */
  void Store(uint32_t i, const Packet& p, uint16_t stage);
  /* The same for a move frame, which stays one. */
  void StoreMove(uint32_t i, const Packet& p, uint16_t stage) {
    Store(i, p, stage);
    descs_[(tail() + i) & mask_].flags |= kDescMove;
  }
  /* Marks the |i|-th packet after the tail a move frame (kDescMove) and
   * counts it in the header. */
  void MarkMove(uint32_t i) {
    descs_[(tail() + i) & mask_].flags |= kDescMove;
    hdr_->moves.store(hdr_->moves.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  /* False while no move frame was entered since ClearMoves: no descriptor
   * needs a look for kDescMove (only one that a hostile NF wrote, which
   * then loses its flag as if that NF had cleared it). */
  bool MaybeMoves() const { return hdr_->moves.load(std::memory_order_relaxed) != 0; }
  /* The egress, once it emptied the ring. */
  void ClearMoves() { hdr_->moves.store(0, std::memory_order_relaxed); }
  const PktDesc& desc(uint32_t i) const { return descs_[(tail() + i) & mask_]; }
  /* Frees the |n| oldest packets. */
  void Release(uint32_t n);
  /* When the buffer is empty, starts filling it from the first slot again,
   * so that a chain reuses the same B x 32 slots turn after turn and they
   * stay in the cache, as a mempool's recycled mbufs do; otherwise each turn
   * would write into the slots least recently used, long evicted. Only the
   * first NF, between batches, may call it. */
  void Rewind();

  const std::string& path() const { return path_; }
  /* The ring index of the |i|-th packet after the tail (0 <= i < used());
   * with Push, also the index of its slot, for transmitting from it
   * without a copy. */
  uint32_t SlotIndex(uint32_t i) const { return static_cast<uint32_t>((tail() + i) & mask_); }
  /* Descriptors View refused in this process: written, since this process
   * last stored them, by the NF that ran before it. */
  uint64_t bad_descriptors() const { return bad_descriptors_.Get(); }

  /* The chain's scheduling words (chain_sched.h), in the file's first page. */
  keel_chain_sched* sched() { return reinterpret_cast<keel_chain_sched*>(base_ + KEEL_SCHED_OFFSET); }

 private:
  PktBuf() = default;
  uint64_t tail() const { return hdr_->tail.load(std::memory_order_relaxed); }
  uint8_t* slot(uint64_t seq) { return slots_ + (seq & mask_) * kSlotSize; }
  void Fill(uint64_t seq, uint32_t slot, uint16_t off, uint16_t len);
  bool Map(int fd, size_t size, std::string* err);

  std::string path_;
  bool owner_ = false;
  size_t size_ = 0;
  uint8_t* base_ = nullptr;
  PktBufHeader* hdr_ = nullptr;
  PktDesc* descs_ = nullptr;
  uint8_t* slots_ = nullptr;
  /* The geometry as Create made it or Open checked it; the header's copy
   * is never read again. slot_size is always kSlotSize. */
  uint32_t nslots_ = 0;
  uint32_t nbufs_ = 0;
  uint64_t mask_ = 0;
  Counter bad_descriptors_;
};

/* View and Store run for every packet at every position of a chain: inline,
 * so that a turn's loop over its descriptors makes no call per packet. */
inline bool PktBuf::View(uint32_t i, Packet* p, uint32_t expect_slot) {
  uint64_t seq = tail() + i;
  const volatile PktDesc& d = descs_[seq & mask_];
  /* Each field read once, checked in 32 bits: no wrap, no second look. */
  uint32_t off = d.off, len = d.len, flags = d.flags, dseq = d.seq, s = d.slot;
  /* An odd start is refused too: the checksum helpers read 16-bit words. */
  if (dseq != static_cast<uint32_t>(seq) || s >= nbufs_ || (expect_slot != kAnySlot && s != expect_slot) ||
      off > kSlotSize || len > kSlotSize - off || (off & 1)) {
    p->Reset(slot(seq), kSlotHeadroom, 0, static_cast<uint16_t>(kSlotSize));
    p->Drop();
    bad_descriptors_.Add(1);
    return false;
  }
  p->Reset(SlotAddr(s), static_cast<uint16_t>(off), static_cast<uint16_t>(len), static_cast<uint16_t>(kSlotSize));
  if (flags & kDescDrop) p->Drop();
  return true;
}

inline void PktBuf::Store(uint32_t i, const Packet& p, uint16_t stage) {
  PktDesc& d = descs_[(tail() + i) & mask_];
  d.off = p.headroom();
  d.len = p.len();
  d.flags = p.dropped() ? kDescDrop : 0;
  d.stage = stage;
}

}  // namespace keel

#endif  // KEEL_PKTBUF_H_
