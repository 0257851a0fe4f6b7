/* SPDX-License-Identifier: Apache-2.0 */
#include "filter_set.h"

namespace keel::ingress {

FilterSet::FilterSet(const std::map<std::string, std::string>& filters, std::vector<std::string>* errors) {
  /* A dead handle is all pcap_compile needs: the link type and snap length. */
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  for (const auto& [name, expr] : filters) {
    Compiled c{name, {}};
    if (pcap_compile(dead, &c.program, expr.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
      errors->push_back("chain " + name + ": filter \"" + expr + "\": " + pcap_geterr(dead));
      continue;
    }
    chains_.push_back(std::move(c));
  }
  pcap_close(dead);
}

FilterSet::~FilterSet() {
  for (auto& c : chains_) pcap_freecode(&c.program);
}

int FilterSet::Match(const uint8_t* frame, uint32_t caplen, uint32_t wirelen) const {
  pcap_pkthdr hdr{};
  hdr.caplen = caplen;
  hdr.len = wirelen;
  for (size_t i = 0; i < chains_.size(); i++) {
    if (pcap_offline_filter(&chains_[i].program, &hdr, frame) != 0) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace keel::ingress
