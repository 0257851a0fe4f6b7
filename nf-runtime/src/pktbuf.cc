/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/pktbuf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace keel {

static size_t Align(size_t v, size_t a) { return (v + a - 1) / a * a; }

bool PktBuf::Map(int fd, size_t size, std::string* err) {
  /* MAP_POPULATE: every page (a 2 MB one on a huge=always tmpfs) is
   * allocated and mapped now, not by a page fault in the middle of a turn
   * the first time a deeper batch reaches it (which, when the kernel has to
   * compact memory for a huge page, has held a turn for 18 ms here). */
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    *err = path_ + ": mmap: " + std::strerror(errno);
    return false;
  }
  /* 2 MB pages where the file system gives them (a tmpfs mounted with
   * huge=always, or shmem THP in advise mode): a turn of B x 32 packets
   * spans hundreds of 4 KB pages, and their TLB misses, in every NF of the
   * chain, cost more than the NF at large B (bench/chain_length.py). */
  madvise(p, size, MADV_HUGEPAGE);
  size_ = size;
  base_ = static_cast<uint8_t*>(p);
  hdr_ = reinterpret_cast<PktBufHeader*>(base_);
  return true;
}

std::unique_ptr<PktBuf> PktBuf::Create(const std::string& path, uint32_t nslots, std::string* err,
                                       uint32_t nbufs) {
  uint32_t n = 1;
  while (n < nslots) n <<= 1;
  if (nbufs < n) nbufs = n;
  if (nbufs > kMaxBufs) {
    *err = path + ": " + std::to_string(nbufs) + " slots, more than a buffer holds (" + std::to_string(kMaxBufs) + ")";
    return nullptr;
  }
  size_t desc_off = Align(sizeof(PktBufHeader), 4096);
  size_t slot_off = Align(desc_off + sizeof(PktDesc) * n, 4096);
  size_t size = Align(slot_off + size_t{kSlotSize} * nbufs, 2 << 20);

  std::unique_ptr<PktBuf> b(new PktBuf());
  b->path_ = path;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *err = path + ": " + std::strerror(errno);
    return nullptr;
  }
  b->owner_ = true;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    *err = path + ": ftruncate: " + std::strerror(errno);
    close(fd);
    return nullptr; /* the destructor unlinks the file */
  }
  bool ok = b->Map(fd, size, err);
  close(fd);
  if (!ok) return nullptr;
  PktBufHeader* h = b->hdr_;
  h->nslots = n;
  h->nbufs = nbufs;
  h->slot_size = kSlotSize;
  h->desc_offset = desc_off;
  h->slot_offset = slot_off;
  h->head.store(0);
  h->moves.store(0);
  h->tail.store(0);
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kPktBufMagic;
  b->descs_ = reinterpret_cast<PktDesc*>(b->base_ + desc_off);
  b->slots_ = b->base_ + slot_off;
  b->nslots_ = n;
  b->nbufs_ = nbufs;
  b->mask_ = n - 1;
  return b;
}

std::unique_ptr<PktBuf> PktBuf::Open(const std::string& path, std::string* err) {
  std::unique_ptr<PktBuf> b(new PktBuf());
  b->path_ = path;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *err = path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(PktBufHeader)) {
    *err = path + ": not a keel packet buffer (too small)";
    close(fd);
    return nullptr;
  }
  bool ok = b->Map(fd, static_cast<size_t>(st.st_size), err);
  close(fd);
  if (!ok) return nullptr;
  /* One read of each field: the owner, or any NF, may rewrite the header
   * while it is checked. */
  const volatile PktBufHeader* h = b->hdr_;
  uint64_t magic = h->magic, n = h->nslots, nbufs = h->nbufs, slot_size = h->slot_size;
  uint64_t desc_off = h->desc_offset, slot_off = h->slot_offset;
  if (magic != kPktBufMagic || n == 0 || n > (1u << 20) || (n & (n - 1)) || slot_size != kSlotSize ||
      nbufs < n || nbufs > kMaxBufs ||
      desc_off < sizeof(PktBufHeader) || desc_off > b->size_ || slot_off > b->size_ ||
      nbufs * kSlotSize > b->size_ - slot_off || desc_off + n * sizeof(PktDesc) > slot_off ||
      desc_off % alignof(PktDesc) != 0) {
    *err = path + ": not a keel packet buffer (bad header)";
    return nullptr;
  }
  b->descs_ = reinterpret_cast<PktDesc*>(b->base_ + desc_off);
  b->slots_ = b->base_ + slot_off;
  b->nslots_ = static_cast<uint32_t>(n);
  b->nbufs_ = static_cast<uint32_t>(nbufs);
  b->mask_ = n - 1;
  return b;
}

PktBuf::~PktBuf() {
  if (base_) munmap(base_, size_);
  if (owner_) unlink(path_.c_str());
}

uint32_t PktBuf::used() const {
  uint64_t n = hdr_->head.load(std::memory_order_acquire) - tail();
  return n < nslots_ ? static_cast<uint32_t>(n) : nslots_;
}

void PktBuf::Fill(uint64_t seq, uint32_t slot, uint16_t off, uint16_t len) {
  PktDesc& d = descs_[seq & mask_];
  d.off = off;
  d.len = len;
  d.flags = 0;
  d.stage = 0;
  d.seq = static_cast<uint32_t>(seq);
  d.slot = slot;
  hdr_->head.store(seq + 1, std::memory_order_release);
}

bool PktBuf::Push(const uint8_t* data, uint16_t len) {
  uint64_t seq = hdr_->head.load(std::memory_order_relaxed);
  if (seq - tail() >= nslots_ || len > kSlotDataRoom) return false;
  std::memcpy(slot(seq) + kSlotHeadroom, data, len);
  Fill(seq, static_cast<uint32_t>(seq & mask_), kSlotHeadroom, len);
  return true;
}

bool PktBuf::PushSlot(uint32_t slot, uint16_t off, uint16_t len, uint32_t* ring_index) {
  uint64_t seq = hdr_->head.load(std::memory_order_relaxed);
  if (seq - tail() >= nslots_ || slot >= nbufs_ || off > kSlotSize || len > kSlotSize - off) return false;
  *ring_index = static_cast<uint32_t>(seq & mask_);
  Fill(seq, slot, off, len);
  return true;
}

void PktBuf::Release(uint32_t n) {
  hdr_->tail.store(tail() + n, std::memory_order_release);
}

void PktBuf::Rewind() {
  if (used() != 0) return;
  hdr_->tail.store(0, std::memory_order_relaxed);
  hdr_->head.store(0, std::memory_order_release);
}

}  // namespace keel
