/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The chains' traffic filters (pcap-filter expressions), compiled once with
 * libpcap for Ethernet frames and matched in chain-name order: the first
 * chain whose filter matches a flow's first packet serves the flow.
 *
 * A FilterSet never changes once built. The control side builds a new one
 * for every change and hands it to the lcore, which swaps its pointer and
 * hands the old one back to be freed: the lcore never waits on a lock.
 */
#ifndef KEEL_INGRESS_FILTER_SET_H_
#define KEEL_INGRESS_FILTER_SET_H_

#include <pcap/pcap.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace keel::ingress {

class FilterSet {
 public:
  /* Compiles |filters| (chain name -> pcap-filter expression). A chain
   * whose filter does not compile is left out and named in |*errors|. */
  FilterSet(const std::map<std::string, std::string>& filters, std::vector<std::string>* errors);
  ~FilterSet();
  FilterSet(const FilterSet&) = delete;
  FilterSet& operator=(const FilterSet&) = delete;

  /* The index of the first chain (in name order) whose filter matches the
   * frame (|caplen| bytes at |frame| of a |wirelen|-byte packet), or -1. */
  int Match(const uint8_t* frame, uint32_t caplen, uint32_t wirelen) const;

  const std::string& Name(int index) const { return chains_[static_cast<size_t>(index)].name; }
  size_t size() const { return chains_.size(); }

 private:
  struct Compiled {
    std::string name;
    bpf_program program;
  };
  std::vector<Compiled> chains_;
};

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_FILTER_SET_H_
