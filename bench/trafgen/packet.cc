/* SPDX-License-Identifier: Apache-2.0 */
#include "packet.h"

#include <algorithm>
#include <cstring>

namespace keel::trafgen {

namespace {

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

void Put32(uint8_t* p, uint32_t v) {
  Put16(p, static_cast<uint16_t>(v >> 16));
  Put16(p + 2, static_cast<uint16_t>(v));
}

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

uint32_t Get32(const uint8_t* p) { return static_cast<uint32_t>(Get16(p)) << 16 | Get16(p + 2); }

/* The ones' complement sum of |len| bytes, added to |sum|. */
uint32_t SumBytes(const uint8_t* p, size_t len, uint32_t sum) {
  for (size_t i = 0; i + 1 < len; i += 2) sum += Get16(p + i);
  if (len & 1) sum += static_cast<uint32_t>(p[len - 1]) << 8;
  return sum;
}

uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

uint16_t L4Header(uint8_t proto) { return proto == 6 ? kTcpHdr : kUdpHdr; }

void WriteEther(const Scenario& sc, uint16_t type, uint8_t* out) {
  std::memcpy(out, sc.dst_mac.data(), 6);
  std::memcpy(out + 6, sc.src_mac.data(), 6);
  Put16(out + 12, type);
}

/* An IPv4 header without options; |total| is the IP total length field. */
void WriteIpv4(uint32_t src, uint32_t dst, uint8_t proto, uint16_t total, uint16_t id, uint8_t* ip) {
  ip[0] = 0x45;
  ip[1] = 0;
  Put16(ip + 2, total);
  Put16(ip + 4, id);
  Put16(ip + 6, 0x4000);  /* DF */
  ip[8] = 64;
  ip[9] = proto;
  Put16(ip + 10, 0);
  Put32(ip + 12, src);
  Put32(ip + 16, dst);
  Put16(ip + 10, Fold(SumBytes(ip, kIpHdr, 0)));
}

}  // namespace

std::string HttpRequest(const Http& http, bool blocked) {
  return "GET " + (blocked ? http.blocked_path : http.path) + " HTTP/1.1\r\nHost: " + http.host + "\r\n\r\n";
}

uint16_t MinFrameLen(const FlowInfo& flow) {
  return static_cast<uint16_t>(std::max<size_t>(
      kMinFrame, kEthHdr + kIpHdr + L4Header(flow.tuple.proto) + flow.prefix.size() + sizeof(Stamp)));
}

std::vector<uint8_t> ExpectedPayload(const FlowInfo& flow, const Stamp& stamp) {
  std::vector<uint8_t> out(stamp.payload_len);
  size_t n = std::min(flow.prefix.size(), out.size());
  std::memcpy(out.data(), flow.prefix.data(), n);
  if (n + sizeof(Stamp) <= out.size()) {
    std::memcpy(out.data() + n, &stamp, sizeof(Stamp));
    n += sizeof(Stamp);
  }
  /* Filler: a pattern that differs per flow and packet, so a payload
   * swapped between packets or flows does not compare equal. */
  uint32_t x = stamp.flow * 2654435761u ^ stamp.seq * 40503u;
  for (size_t i = n; i < out.size(); i++) out[i] = static_cast<uint8_t>(x + i * 7);
  return out;
}

uint16_t BuildFrame(const Scenario& sc, const FlowInfo& flow, Stamp stamp, uint16_t frame_len, uint8_t* out) {
  const FlowTuple& t = flow.tuple;
  frame_len = std::clamp(frame_len, MinFrameLen(flow), kMaxFrame);
  uint16_t l4 = L4Header(t.proto);
  stamp.magic = kStampMagic;
  stamp.payload_len = static_cast<uint16_t>(frame_len - kEthHdr - kIpHdr - l4);
  WriteEther(sc, 0x0800, out);
  uint8_t* ip = out + kEthHdr;
  WriteIpv4(t.src_ip, t.dst_ip, t.proto, static_cast<uint16_t>(frame_len - kEthHdr), static_cast<uint16_t>(stamp.seq),
            ip);
  uint8_t* h = ip + kIpHdr;
  std::vector<uint8_t> payload = ExpectedPayload(flow, stamp);
  std::memcpy(h + l4, payload.data(), payload.size());
  Put16(h, t.sport);
  Put16(h + 2, t.dport);
  uint16_t seg = static_cast<uint16_t>(l4 + payload.size());
  size_t csum_at;
  if (t.proto == 6) {
    Put32(h + 4, 1 + stamp.seq * 1460u);  /* sequence number */
    Put32(h + 8, 1);                      /* acknowledgment */
    h[12] = 5 << 4;
    h[13] = 0x18;  /* PSH, ACK */
    Put16(h + 14, 65535);
    Put16(h + 18, 0);
    csum_at = 16;
  } else {
    Put16(h + 4, seg);
    csum_at = 6;
  }
  Put16(h + csum_at, 0);
  uint8_t pseudo[12];
  Put32(pseudo, t.src_ip);
  Put32(pseudo + 4, t.dst_ip);
  pseudo[8] = 0;
  pseudo[9] = t.proto;
  Put16(pseudo + 10, seg);
  uint16_t csum = Fold(SumBytes(h, seg, SumBytes(pseudo, sizeof(pseudo), 0)));
  if (t.proto == 17 && csum == 0) csum = 0xffff;
  Put16(h + csum_at, csum);
  return frame_len;
}

uint16_t BuildMalformed(const Scenario& sc, const std::string& kind, uint32_t dst_ip, uint8_t* out) {
  std::memset(out, 0, 128);
  constexpr uint16_t kLen = 96;
  uint8_t* ip = out + kEthHdr;
  WriteEther(sc, kind == "not_ipv4" ? 0x88b5 : 0x0800, out);
  if (kind == "truncated_ipv4") {
    /* The frame ends 10 bytes into its IPv4 header. */
    WriteIpv4(sc.src_ip, dst_ip, 17, kIpHdr, 0, ip);
    return kEthHdr + 10;
  }
  if (kind == "bad_ihl") {
    WriteIpv4(sc.src_ip, dst_ip, 17, kLen - kEthHdr, 0, ip);
    ip[0] = 0x43;  /* a 12-byte header: less than the minimum of 20 */
  } else if (kind == "ip_length_past_frame") {
    WriteIpv4(sc.src_ip, dst_ip, 17, 1400, 0, ip);
  } else if (kind != "not_ipv4") {
    return 0;
  }
  std::memcpy(out + kLen - sizeof(kMalformedMarker), kMalformedMarker, sizeof(kMalformedMarker));
  return kLen;
}

bool ParseFrame(const uint8_t* f, size_t len, Parsed* p) {
  if (len < kEthHdr) return false;
  std::memcpy(p->dst_mac.data(), f, 6);
  std::memcpy(p->src_mac.data(), f + 6, 6);
  size_t off = 12;
  uint16_t type = Get16(f + off);
  p->vlan = -1;
  if (type == 0x8100) {
    if (len < kEthHdr + kVlanHdr) return false;
    p->vlan = Get16(f + off + 2) & 0x0fff;
    off += 4;
    type = Get16(f + off);
  }
  off += 2;
  if (type != 0x0800 || len < off + kIpHdr) return false;
  const uint8_t* ip = f + off;
  size_t ihl = (ip[0] & 0x0f) * 4u;
  uint16_t total = Get16(ip + 2);
  if ((ip[0] >> 4) != 4 || ihl < kIpHdr || total < ihl || off + total > len) return false;
  if (Get16(ip + 6) & 0x3fff) return false;  /* a fragment */
  p->proto = ip[9];
  p->src_ip = Get32(ip + 12);
  p->dst_ip = Get32(ip + 16);
  if (p->proto != 6 && p->proto != 17) return false;
  const uint8_t* h = ip + ihl;
  size_t seg = total - ihl;
  size_t l4 = p->proto == 6 ? kTcpHdr : kUdpHdr;
  if (seg < l4) return false;
  if (p->proto == 6) {
    l4 = (h[12] >> 4) * 4u;
    if (l4 < kTcpHdr || seg < l4) return false;
  }
  p->sport = Get16(h);
  p->dport = Get16(h + 2);
  p->payload = h + l4;
  p->payload_len = static_cast<uint16_t>(seg - l4);
  return true;
}

bool IsMalformedMarker(const uint8_t* frame, size_t len) {
  const uint8_t* end = frame + len;
  return std::search(frame, end, kMalformedMarker, kMalformedMarker + sizeof(kMalformedMarker) - 1) != end;
}

Aes128Cbc::Aes128Cbc(const std::array<uint8_t, 16>& key, const std::array<uint8_t, 16>& iv)
    : key_(key), iv_(iv), ctx_(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free) {}

bool Aes128Cbc::Encrypt(const uint8_t* in, size_t len, std::vector<uint8_t>* out) {
  size_t at = out->size();
  out->resize(at + len + kAesBlock);
  int body = 0, tail = 0;
  if (!ctx_ || EVP_EncryptInit_ex(ctx_.get(), EVP_aes_128_cbc(), nullptr, key_.data(), iv_.data()) != 1 ||
      EVP_EncryptUpdate(ctx_.get(), out->data() + at, &body, in, static_cast<int>(len)) != 1 ||
      EVP_EncryptFinal_ex(ctx_.get(), out->data() + at + body, &tail) != 1)
    return false;
  out->resize(at + body + tail);
  return true;
}

bool Aes128Cbc::Decrypt(const uint8_t* in, size_t len, std::vector<uint8_t>* out) {
  if (len == 0 || len % kAesBlock) return false;
  out->resize(len);
  int body = 0, tail = 0;
  if (!ctx_ || EVP_DecryptInit_ex(ctx_.get(), EVP_aes_128_cbc(), nullptr, key_.data(), iv_.data()) != 1 ||
      EVP_DecryptUpdate(ctx_.get(), out->data(), &body, in, static_cast<int>(len)) != 1 ||
      EVP_DecryptFinal_ex(ctx_.get(), out->data() + body, &tail) != 1)
    return false;
  out->resize(body + tail);
  return true;
}

Check CheckFrame(const Chain& chain, uint16_t chain_index, const Mac& sink_mac, const Parsed& p,
                 const std::vector<FlowInfo>& flows, Aes128Cbc* aes, std::vector<uint8_t>* scratch) {
  Check c;
  c.seen_src_ip = p.src_ip;
  c.seen_sport = p.sport;
  const uint8_t* plain = p.payload;
  size_t plain_len = p.payload_len;
  if (chain.expect.encrypt) {
    if (!aes->Decrypt(p.payload, p.payload_len, scratch)) {
      c.error = "payload of " + std::to_string(p.payload_len) + " bytes does not decrypt";
      return c;
    }
    plain = scratch->data();
    plain_len = scratch->size();
  }
  /* The stamp follows the HTTP request when there is one ("\r\n\r\n" ends
   * it), else it opens the payload. */
  size_t at = 0;
  if (plain_len >= 4 && std::memcmp(plain, "GET ", 4) == 0) {
    const uint8_t* end = plain + std::min<size_t>(plain_len, 512);
    static constexpr char kEnd[] = "\r\n\r\n";
    const uint8_t* e = std::search(plain, end, kEnd, kEnd + 4);
    if (e == end) {
      c.error = "HTTP request without its end";
      return c;
    }
    at = static_cast<size_t>(e - plain) + 4;
  }
  if (plain_len < at + sizeof(Stamp)) {
    c.error = "payload too short for a stamp";
    return c;
  }
  std::memcpy(&c.stamp, plain + at, sizeof(Stamp));
  if (c.stamp.magic != kStampMagic) {
    c.error = "no stamp in the payload";
    return c;
  }
  c.has_stamp = true;
  if (c.stamp.flow >= flows.size() || flows[c.stamp.flow].chain != chain_index || c.stamp.chain != chain_index) {
    c.has_stamp = false;
    c.error = "stamp names flow " + std::to_string(c.stamp.flow) + " of chain " + std::to_string(c.stamp.chain) +
              ", not one of this chain's";
    return c;
  }
  const FlowInfo& flow = flows[c.stamp.flow];
  const FlowTuple& t = flow.tuple;
  const Expect& e = chain.expect;
  std::string where = "flow " + std::to_string(c.stamp.flow) + " seq " + std::to_string(c.stamp.seq) + ": ";
  if (e.vlan ? p.vlan != *e.vlan : p.vlan != -1) {
    c.error = where + "VLAN " + (p.vlan < 0 ? "none" : std::to_string(p.vlan)) + ", expected " +
              (e.vlan ? std::to_string(*e.vlan) : "none");
    return c;
  }
  const Mac& mac = e.dst_mac ? *e.dst_mac : sink_mac;
  if (p.dst_mac != mac) {
    c.error = where + "dst MAC " + MacString(p.dst_mac) + ", expected " + MacString(mac);
    return c;
  }
  if (p.dst_ip != t.dst_ip || p.dport != t.dport || p.proto != t.proto) {
    c.error = where + "destination " + Ipv4String(p.dst_ip) + ":" + std::to_string(p.dport) + " changed";
    return c;
  }
  if (e.snat) {
    if (p.src_ip != e.snat_ip || p.sport < e.snat_port_min || p.sport > e.snat_port_max) {
      c.error = where + "source " + Ipv4String(p.src_ip) + ":" + std::to_string(p.sport) + " not NATed to " +
                Ipv4String(e.snat_ip) + ":" + std::to_string(e.snat_port_min) + "-" + std::to_string(e.snat_port_max);
      return c;
    }
  } else if (p.src_ip != t.src_ip || p.sport != t.sport) {
    c.error = where + "source " + Ipv4String(p.src_ip) + ":" + std::to_string(p.sport) + " changed";
    return c;
  }
  std::vector<uint8_t> expected = ExpectedPayload(flow, c.stamp);
  if (plain_len != expected.size() || std::memcmp(plain, expected.data(), plain_len) != 0) {
    size_t diff = 0;
    while (diff < std::min(plain_len, expected.size()) && plain[diff] == expected[diff]) diff++;
    c.error = where + "payload differs from what was sent at byte " + std::to_string(diff) + " (" +
              std::to_string(plain_len) + " bytes, sent " + std::to_string(expected.size()) + ")";
    return c;
  }
  c.compared_bytes = plain_len;
  c.ok = true;
  return c;
}

}  // namespace keel::trafgen
