// SPDX-License-Identifier: Apache-2.0
// The yield watchdog's rule (cs-watchdog.h) against a model of one SCHED_FIFO
// core: threads at one priority in a queue, sched_yield to the tail, blocking
// off the queue, an enforcer that looks every tick and preempts whoever runs
// (who keeps the head). No daemon, no real core: runs anywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "cs-watchdog.h"

namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kTimeoutNs = 10000 * kUs;
constexpr uint64_t kTickNs = 1000 * kUs;

// How a modelled thread behaves once it has the CPU.
struct Behaviour {
  uint64_t turn_ns = 2 * kUs;  // runs this long, then yields
  uint64_t spin_from_ns = ~0ull;  // from then on never yields
  uint64_t sleep_ns = 0;       // > 0: blocks this long after each turn instead of yielding
  uint64_t exit_at_ns = ~0ull; // from then on it is exiting and runs without yielding
};

struct Thread {
  Behaviour b;
  cs_wd_thread wd{};
  uint64_t cpu_ns = 0, pcount = 0, in_turn_ns = 0, wake_ns = 0;
  bool queued = true, fifo = true, attached = true;
};

// One core: the FIFO queue, time in 1 us steps, a look every tick (or
// sooner when the watchdog asks to recheck).
class Core {
 public:
  explicit Core(std::vector<Behaviour> bs) {
    for (size_t i = 0; i < bs.size(); i++) {
      th_.push_back(Thread{});
      th_.back().b = bs[i];
      th_.back().wd.key = i + 1;
      queue_.push_back(i);
    }
    if (!queue_.empty()) th_[queue_.front()].pcount++;
  }

  // Runs until until_ns or a verdict; returns true on a verdict.
  bool Run(uint64_t until_ns) {
    for (; now_ns_ < until_ns; now_ns_ += kUs) {
      if (now_ns_ >= next_look_ns_ && !Stalled() && Look()) return true;
      Step();
    }
    return false;
  }

  // From from_ns, the core is lost for len_ns (the host deschedules the
  // vCPU): no look, no switch, and the kernel charges the time to whoever
  // runs, whose turn (timed by the wall clock) goes on meanwhile.
  void StallAt(uint64_t from_ns, uint64_t len_ns) { stalls_.push_back({from_ns, from_ns + len_ns}); }

  Thread& t(size_t i) { return th_[i]; }
  uint64_t now_ns() const { return now_ns_; }
  const cs_wd_verdict& verdict() const { return v_; }
  uint64_t verdict_ns() const { return verdict_ns_; }
  // Takes a thread off the core (detach) or puts it back (attach).
  void SetAttached(size_t i, bool on) {
    th_[i].attached = on;
    if (!on) {
      for (auto it = queue_.begin(); it != queue_.end(); ++it)
        if (*it == i) {
          bool head = it == queue_.begin();
          queue_.erase(it);
          if (head && !queue_.empty()) th_[queue_.front()].pcount++;
          break;
        }
      th_[i].queued = false;
      th_[i].wd.known = 0;
    } else if (!th_[i].queued) {
      th_[i].queued = true;
      Enqueue(i);
    }
  }

 private:
  void Enqueue(size_t i) {
    queue_.push_back(i);
    if (queue_.size() == 1) th_[i].pcount++;
  }

  void SwitchToNext() {
    if (!queue_.empty()) th_[queue_.front()].pcount++;
  }

  bool Stalled() const {
    for (const auto& st : stalls_)
      if (now_ns_ >= st.first && now_ns_ < st.second) return true;
    return false;
  }

  void Step() {
    if (Stalled()) {
      if (!queue_.empty()) {
        th_[queue_.front()].cpu_ns += kUs;
        th_[queue_.front()].in_turn_ns += kUs;
      }
      return;
    }
    for (size_t i = 0; i < th_.size(); i++) {
      Thread& x = th_[i];
      if (x.attached && !x.queued && x.fifo && x.wake_ns && now_ns_ >= x.wake_ns) {
        x.wake_ns = 0;
        x.queued = true;
        Enqueue(i);
      }
    }
    if (queue_.empty()) return;
    size_t h = queue_.front();
    Thread& x = th_[h];
    x.cpu_ns += kUs;
    x.in_turn_ns += kUs;
    bool holds = now_ns_ >= x.b.spin_from_ns || now_ns_ >= x.b.exit_at_ns;
    if (holds || x.in_turn_ns < x.b.turn_ns) return;
    x.in_turn_ns = 0;
    queue_.pop_front();
    if (x.b.sleep_ns) {
      x.queued = false;
      x.wake_ns = now_ns_ + x.b.sleep_ns;
    } else {
      queue_.push_back(h);
    }
    SwitchToNext();
  }

  bool Look() {
    // The enforcer's wake-up preempts whoever runs; it gets the CPU back after.
    if (!queue_.empty()) th_[queue_.front()].pcount++;
    idx_.clear();
    std::vector<cs_wd_thread*> ths;
    std::vector<cs_wd_now> now;
    for (size_t i = 0; i < th_.size(); i++) {
      if (!th_[i].attached) continue;
      idx_.push_back(i);
      ths.push_back(&th_[i].wd);
      now.push_back({1, th_[i].cpu_ns, th_[i].pcount});
    }
    cs_wd_ops ops{
        [](void* c, size_t i) { auto* me = static_cast<Core*>(c); return me->Runnable(me->idx_[i]) ? 1 : 0; },
        [](void* c, size_t i) {
          auto* me = static_cast<Core*>(c);
          const Thread& x = me->th_[me->idx_[i]];
          return me->Runnable(me->idx_[i]) && x.fifo && !me->Exiting(me->idx_[i]) ? 1 : 0;
        },
        [](void* c, size_t i) { auto* me = static_cast<Core*>(c); return me->Exiting(me->idx_[i]) ? 1 : 0; },
    };
    uint64_t recheck = 0;
    uint64_t late = now_ns_ - next_look_ns_;
    int got = cs_wd_look(&w_, ths.data(), now.data(), ths.size(), now_ns_, late, kTimeoutNs, &ops,
                         this, &v_, &recheck);
    next_look_ns_ = now_ns_ + (recheck && recheck < kTickNs ? std::max<uint64_t>(recheck, 50 * kUs) : kTickNs);
    if (got) {
      v_.holder = idx_[v_.holder];
      if (v_.waiter < idx_.size()) v_.waiter = idx_[v_.waiter];
      verdict_ns_ = now_ns_;
    }
    return got;
  }

  bool Runnable(size_t i) const { return th_[i].queued || (!th_[i].fifo && th_[i].attached); }
  bool Exiting(size_t i) const { return now_ns_ >= th_[i].b.exit_at_ns; }

  std::vector<Thread> th_;
  std::deque<size_t> queue_;
  std::vector<size_t> idx_;
  cs_wd_window w_{};
  cs_wd_verdict v_{};
  uint64_t now_ns_ = 0, next_look_ns_ = 0, verdict_ns_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> stalls_;
};

Behaviour Turns(uint64_t ns) {
  Behaviour b;
  b.turn_ns = ns;
  return b;
}

TEST(Watchdog, ShortTurnsAreNeverHeld) {
  Core c({Turns(3 * kUs), Turns(5 * kUs), Turns(2 * kUs), Turns(40 * kUs)});
  EXPECT_FALSE(c.Run(500 * kTickNs));
}

// Turns just under the timeout, each spanning many looks, in chains that
// share the core: never a verdict.
TEST(Watchdog, TurnsThatSpanLooksButEndBeforeTheTimeoutAreNotHeld) {
  for (uint64_t turn : {1500 * kUs, 4321 * kUs, 9900 * kUs}) {
    Core c({Turns(turn), Turns(7 * kUs), Turns(turn), Turns(3 * kUs)});
    EXPECT_FALSE(c.Run(300 * kTickNs)) << "turn " << turn / kUs << " us";
  }
}

TEST(Watchdog, SpinnerIsHeldWithinTheTimeoutAndATick) {
  for (uint64_t from : {20 * kTickNs, 20 * kTickNs + 1 * kUs, 20 * kTickNs + 999 * kUs}) {
    Behaviour spin = Turns(5 * kUs);
    spin.spin_from_ns = from;
    Core c({Turns(5 * kUs), spin, Turns(5 * kUs), Turns(20 * kUs)});
    ASSERT_TRUE(c.Run(100 * kTickNs)) << "spin from " << from;
    EXPECT_EQ(c.verdict().holder, 1u);
    EXPECT_NE(c.verdict().waiter, 1u);
    EXPECT_GE(c.verdict().held_ns, kTimeoutNs);
    // It began to hold at its first turn after `from` (within a few us).
    EXPECT_LE(c.verdict_ns(), from + kTimeoutNs + kTickNs + 100 * kUs)
        << "verdict " << (c.verdict_ns() - from) / kUs << " us after the spin began";
  }
}

TEST(Watchdog, LoneSpinnerTakesTheCoreFromNobody) {
  Behaviour spin;
  spin.spin_from_ns = 0;
  Core c({spin});
  EXPECT_FALSE(c.Run(100 * kTickNs));
  // Its only fellow sleeps: it yields to nobody.
  Behaviour sleeper = Turns(5 * kUs);
  sleeper.sleep_ns = 50 * kTickNs;
  Core d({spin, sleeper});
  d.SetAttached(1, false);
  d.t(1).attached = true;
  d.t(1).wake_ns = 1000 * kTickNs;
  EXPECT_FALSE(d.Run(100 * kTickNs));
}

// Threads that block between turns are not on the queue while they sleep:
// whoever runs meanwhile yields to nobody.
TEST(Watchdog, ThreadsThatBlockDoNotMakeOthersHolders) {
  Behaviour sleeper = Turns(50 * kUs);
  sleeper.sleep_ns = 3 * kTickNs;
  Core c({sleeper, sleeper, Turns(2 * kUs)});
  EXPECT_FALSE(c.Run(300 * kTickNs));
}

// A waiter pushed out of SCHED_FIFO (by anyone) waits behind healthy
// threads that take turns: that is no evidence against them.
TEST(Watchdog, AWaiterOffTheRunPriorityIsNoEvidence) {
  Core c({Turns(5 * kUs), Turns(5 * kUs), Turns(5 * kUs)});
  c.Run(5 * kTickNs);
  c.SetAttached(2, false);
  c.t(2).attached = true;  // still watched, runnable, never scheduled: demoted
  c.t(2).fifo = false;
  EXPECT_FALSE(c.Run(300 * kTickNs));
}

// A thread in its exit (the kernel tearing it down) gets no verdict.
TEST(Watchdog, ExitingThreadIsNotHeld) {
  Behaviour ending = Turns(5 * kUs);
  ending.exit_at_ns = 10 * kTickNs;
  Core c({Turns(5 * kUs), ending, Turns(5 * kUs)});
  EXPECT_FALSE(c.Run(100 * kTickNs));
}

// The host stalls the core for 6 ms in the middle of a 9 ms turn (timeout
// 10 ms): the kernel charges the turn 15 ms, as CoopschedTest saw on a CI
// VM. The enforcer's late look tells the stall: no verdict.
TEST(Watchdog, ATurnStretchedByAStallOfTheCoreIsNotHeld) {
  Core c({Turns(5 * kUs), Turns(4000 * kUs), Turns(9000 * kUs), Turns(300 * kUs)});
  for (uint64_t at = 20 * kTickNs; at < 280 * kTickNs; at += 23700 * kUs) c.StallAt(at, 6000 * kUs);
  EXPECT_FALSE(c.Run(300 * kTickNs));
}

// A spinner that also stalls the core at every tick (as long non-preemptible
// work in the kernel would) is credited one timeout at most: held within
// twice the timeout and a tick.
TEST(Watchdog, ASpinnerThatMakesEveryLookLateIsStillHeld) {
  Behaviour spin = Turns(5 * kUs);
  spin.spin_from_ns = 20 * kTickNs;
  Core c({Turns(5 * kUs), spin, Turns(5 * kUs)});
  for (uint64_t at = 20 * kTickNs; at < 100 * kTickNs; at += 2 * kTickNs) c.StallAt(at, 1500 * kUs);
  ASSERT_TRUE(c.Run(100 * kTickNs));
  EXPECT_EQ(c.verdict().holder, 1u);
  EXPECT_LE(c.verdict_ns(), 20 * kTickNs + 2 * kTimeoutNs + 2 * kTickNs);
}

// Attached and detached every half tick, with long turns: each attach
// starts the threads' accounts afresh, and nothing adds up across.
TEST(Watchdog, RapidAttachAndDetachIsNotHeld) {
  Core c({Turns(900 * kUs), Turns(900 * kUs), Turns(3 * kUs), Turns(3 * kUs)});
  for (int i = 0; i < 400; i++) {
    ASSERT_FALSE(c.Run(c.now_ns() + 500 * kUs)) << "cycle " << i;
    c.SetAttached(0, i % 2);
    c.SetAttached(1, i % 2);
  }
}

}  // namespace
