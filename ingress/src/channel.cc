/* SPDX-License-Identifier: Apache-2.0 */
#include "channel.h"

#include <rte_errno.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

namespace keel::ingress {

static_assert(sizeof(Msg) % 4 == 0, "rte_ring elements are a multiple of 4 bytes");

void Msg::SetChain(const std::string& name) {
  size_t n = std::min(name.size(), sizeof(chain) - 1);
  std::memcpy(chain, name.data(), n);
  chain[n] = '\0';
}

bool Channel::Init(unsigned size, std::string* err) {
  to_control_ = rte_ring_create_elem("keel_ing_to_ctl", sizeof(Msg), size, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
  to_lcore_ = rte_ring_create_elem("keel_ing_to_lcore", sizeof(Msg), size, SOCKET_ID_ANY, RING_F_SC_DEQ);
  if (!to_control_ || !to_lcore_) {
    *err = std::string("control rings: ") + rte_strerror(rte_errno);
    return false;
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  lcore_wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0 || lcore_wake_fd_ < 0) {
    *err = std::string("eventfd: ") + std::strerror(errno);
    return false;
  }
  return true;
}

Channel::~Channel() {
  rte_ring_free(to_control_);
  rte_ring_free(to_lcore_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (lcore_wake_fd_ >= 0) close(lcore_wake_fd_);
}

/* rte_ring_enqueue_elem only reads the element; its pointer is not const in 22.11. */
bool Channel::ToControl(const Msg& m) {
  return rte_ring_enqueue_elem(to_control_, const_cast<Msg*>(&m), sizeof(Msg)) == 0;
}
bool Channel::FromControl(Msg* m) { return rte_ring_dequeue_elem(to_lcore_, m, sizeof(Msg)) == 0; }
bool Channel::ToLcore(const Msg& m) {
  if (rte_ring_enqueue_elem(to_lcore_, const_cast<Msg*>(&m), sizeof(Msg)) != 0) return false;
  uint64_t one = 1;
  (void)!write(lcore_wake_fd_, &one, sizeof(one));
  return true;
}
bool Channel::FromLcore(Msg* m) { return rte_ring_dequeue_elem(to_control_, m, sizeof(Msg)) == 0; }

void Channel::WakeControl() {
  uint64_t one = 1;
  /* The counter only saturates if the control thread is gone; nothing to do then. */
  (void)!write(wake_fd_, &one, sizeof(one));
}

void Channel::DrainWake() {
  uint64_t n;
  (void)!read(wake_fd_, &n, sizeof(n));
}

void Channel::DrainLcoreWake() {
  uint64_t n;
  (void)!read(lcore_wake_fd_, &n, sizeof(n));
}

}  // namespace keel::ingress
