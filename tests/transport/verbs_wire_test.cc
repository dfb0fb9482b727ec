// The verbs transport's wire formats (addresses and remote keys through the store) and its
// receive-credit bookkeeping: device-free parts, tested without RDMA hardware.
#include <gtest/gtest.h>

#include "transport/verbs/verbs_credits.h"
#include "transport/verbs/verbs_wire.h"

namespace eagercomm::verbs {
namespace {

QpAddress sample_address(int rank, int size) {
  QpAddress a;
  a.rank = rank;
  a.instance = 0x1234567890abcdefull;
  a.link = 1;  // Ethernet
  a.port = 1;
  a.lid = 0;
  a.mtu = 4096;
  a.use_gid = true;
  a.gid_index = 3;
  a.gid_roce_v2 = true;
  a.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 7};
  a.credit_addr = 0x7f0000001000ull;
  a.credit_rkey = 0xabcd;
  a.job_size = static_cast<uint32_t>(size);
  for (int r = 0; r < size; ++r) a.qps.push_back({r == rank ? 0u : 0x100u + r, 0x777u + r});
  return a;
}

TEST(VerbsWire, AddressRoundTrips) {
  const QpAddress a = sample_address(2, 4);
  auto d = decode_address(encode_address(a), 2, 4);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value().instance, a.instance);
  EXPECT_EQ(d.value().mtu, 4096u);
  EXPECT_TRUE(d.value().use_gid);
  EXPECT_EQ(d.value().gid_index, 3);
  EXPECT_TRUE(d.value().gid_roce_v2);
  EXPECT_EQ(d.value().gid, a.gid);
  EXPECT_EQ(d.value().credit_addr, a.credit_addr);
  EXPECT_EQ(d.value().credit_rkey, a.credit_rkey);
  ASSERT_EQ(d.value().qps.size(), 4u);
  EXPECT_EQ(d.value().qps[3].qpn, 0x103u);
  EXPECT_EQ(d.value().qps[3].psn, 0x77au);
}

TEST(VerbsWire, EveryTruncationAndEveryFlippedByteIsRefused) {
  const std::vector<uint8_t> blob = encode_address(sample_address(1, 3));
  for (size_t n = 0; n < blob.size(); ++n) {
    auto d = decode_address(std::span(blob).first(n), 1, 3);
    ASSERT_FALSE(d.ok()) << "accepted a blob cut to " << n << " bytes";
    EXPECT_EQ(d.status().code(), StatusCode::kProtocolError);
  }
  for (size_t i = 0; i < blob.size(); ++i) {
    std::vector<uint8_t> bad = blob;
    bad[i] ^= 0x40;
    EXPECT_FALSE(decode_address(bad, 1, 3).ok()) << "accepted a flip at byte " << i;
  }
  std::vector<uint8_t> longer = blob;
  longer.push_back(0);
  EXPECT_FALSE(decode_address(longer, 1, 3).ok());
}

TEST(VerbsWire, AddressFromTheWrongRankOrJobSizeOrWithImpossibleFields) {
  const std::vector<uint8_t> blob = encode_address(sample_address(1, 3));
  auto d = decode_address(blob, 2, 3);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("names rank 1"), std::string::npos);
  d = decode_address(blob, 1, 4);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("different world sizes"), std::string::npos);

  QpAddress a = sample_address(0, 2);
  a.qps[1].qpn = kMaxQpNumber + 1;
  d = decode_address(encode_address(a), 0, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("24 bits"), std::string::npos);
  a = sample_address(0, 2);
  a.mtu = 1500;
  d = decode_address(encode_address(a), 0, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("MTU"), std::string::npos);
  a = sample_address(0, 2);
  a.port = 0;
  EXPECT_FALSE(decode_address(encode_address(a), 0, 2).ok());
}

// Over rdma_cm the queue pairs are made on demand: the address carries none.
QpAddress with_cm(QpAddress a) {
  a.qps.clear();
  a.offers_cm = true;
  a.cm_family = 4;
  a.cm_ip = {10, 0, 0, 7};
  a.cm_port = 18515;
  return a;
}

TEST(VerbsWire, RdmaCmEndpointRoundTripsAndIsChecked) {
  auto d = decode_address(encode_address(with_cm(sample_address(1, 2))), 1, 2);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE(d.value().offers_cm);
  EXPECT_EQ(d.value().cm_family, 4);
  EXPECT_EQ(d.value().cm_port, 18515);
  EXPECT_EQ(d.value().cm_ip[3], 7);
  EXPECT_TRUE(d.value().qps.empty());
  EXPECT_EQ(d.value().job_size, 2u);
  // The same with queue pairs given: they are not written (the decoder would refuse the length).
  QpAddress with_qps = with_cm(sample_address(1, 2));
  with_qps.qps = sample_address(1, 2).qps;
  EXPECT_EQ(encode_address(with_qps), encode_address(with_cm(sample_address(1, 2))));
  // A world-size mismatch is still named without queue pairs to count.
  d = decode_address(encode_address(with_cm(sample_address(1, 2))), 1, 3);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("different world sizes"), std::string::npos);
  d = decode_address(encode_address(sample_address(1, 2)), 1, 2);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d.value().offers_cm);
  EXPECT_EQ(d.value().qps.size(), 2u);

  const auto refused = [](const QpAddress& a, const char* why) {
    auto r = decode_address(encode_address(a), a.rank, static_cast<int>(a.job_size));
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_EQ(r.status().code(), StatusCode::kProtocolError);
    EXPECT_NE(r.status().message().find("rdma_cm"), std::string::npos) << r.status().message();
  };
  QpAddress a = with_cm(sample_address(0, 2));
  a.cm_port = 0;
  refused(a, "port 0");
  a = with_cm(sample_address(0, 2));
  a.cm_family = 5;
  refused(a, "family 5");
  a = with_cm(sample_address(0, 2));
  a.cm_ip[9] = 1;  // bytes past an IPv4 address
  refused(a, "IPv4 with trailing bytes");
  a = sample_address(0, 2);
  a.cm_port = 80;  // endpoint fields without the flag
  refused(a, "fields without the flag");

  const std::vector<uint8_t> blob = encode_address(with_cm(sample_address(1, 3)));
  for (size_t n = 0; n < blob.size(); ++n) {
    EXPECT_FALSE(decode_address(std::span(blob).first(n), 1, 3).ok()) << n;
  }
}

TEST(VerbsWire, HelloRoundTripsWithCmPaddingAndIsChecked) {
  const std::vector<uint8_t> blob = encode_hello({3, 1, 0x42});
  ASSERT_EQ(blob.size(), kCmHelloBytes);
  auto h = decode_hello(blob, 1, 4);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h.value().from, 3);
  EXPECT_EQ(h.value().instance, 0x42u);
  // The CM pads private data with zeros to 56 bytes.
  std::vector<uint8_t> padded = blob;
  padded.resize(56, 0);
  EXPECT_TRUE(decode_hello(padded, 1, 4).ok());
  padded[50] = 1;
  EXPECT_NE(decode_hello(padded, 1, 4).status().message().find("after the hello"),
            std::string::npos);
  for (size_t n = 0; n < blob.size(); ++n) {
    EXPECT_FALSE(decode_hello(std::span(blob).first(n), 1, 4).ok()) << n;
  }
  for (size_t i = 0; i < blob.size(); ++i) {
    std::vector<uint8_t> bad = blob;
    bad[i] ^= 0x10;
    EXPECT_FALSE(decode_hello(bad, 1, 4).ok()) << "accepted a flip at byte " << i;
  }
  EXPECT_NE(decode_hello(blob, 2, 4).status().message().find("addressed to rank 1"),
            std::string::npos);
  EXPECT_NE(decode_hello(blob, 1, 3).status().message().find("not another rank"),
            std::string::npos);
  EXPECT_FALSE(decode_hello(encode_hello({1, 1, 0}), 1, 4).ok());  // from itself
  EXPECT_FALSE(decode_hello(encode_key({1, 2, 3, 4, 5, KeyKind::kHost}), 1, 4).ok());
}

TEST(VerbsWire, KeyRoundTripsAndIsChecked) {
  RegionKey k{3, 42, 0x10000, 4096, 0x55, KeyKind::kCuda};
  auto d = decode_key(encode_key(k), 3, 42);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value().addr, 0x10000u);
  EXPECT_EQ(d.value().length, 4096u);
  EXPECT_EQ(d.value().rkey, 0x55u);
  EXPECT_EQ(d.value().kind, KeyKind::kCuda);

  EXPECT_NE(decode_key(encode_key(k), 2, 42).status().message().find("made by rank 3"),
            std::string::npos);
  EXPECT_NE(decode_key(encode_key(k), 3, 43).status().message().find("another transport"),
            std::string::npos);
  RegionKey wrap = k;
  wrap.addr = ~uint64_t{0} - 10;
  EXPECT_FALSE(decode_key(encode_key(wrap), 3, 42).ok());
  RegionKey empty = k;
  empty.length = 0;
  EXPECT_FALSE(decode_key(encode_key(empty), 3, 42).ok());
  const std::vector<uint8_t> blob = encode_key(k);
  for (size_t n = 0; n < blob.size(); ++n) {
    EXPECT_FALSE(decode_key(std::span(blob).first(n), 3, 42).ok()) << n;
  }
  EXPECT_FALSE(decode_key(encode_address(sample_address(3, 4)), 3, 42).ok());
}

TEST(VerbsCredits, SenderStopsAtTheWindowAndTakesOnlyPossibleUpdates) {
  SendCredits c(4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(c.can_send());
    c.on_sent();
  }
  EXPECT_FALSE(c.can_send());
  EXPECT_FALSE(c.update(3));   // went back
  EXPECT_FALSE(c.update(9));   // more than sent + window: impossible
  EXPECT_FALSE(c.can_send());  // refused updates change nothing
  EXPECT_TRUE(c.update(6));    // the peer reposted two
  EXPECT_EQ(c.available(), 2u);
  EXPECT_TRUE(c.update(6));  // a repeated (or late) update is harmless
  c.on_sent();
  c.on_sent();
  EXPECT_FALSE(c.can_send());
  EXPECT_TRUE(c.update(10));
  EXPECT_EQ(c.available(), 4u);
}

TEST(VerbsCredits, TargetPublishesInBatchesOfAQuarterWindow) {
  ReturnCredits r(8);
  EXPECT_FALSE(r.due());
  r.on_reposted();
  EXPECT_FALSE(r.due());
  r.on_reposted();
  ASSERT_TRUE(r.due());
  EXPECT_EQ(r.publish(), 10u);
  EXPECT_FALSE(r.due());
  ReturnCredits tiny(1);
  tiny.on_reposted();
  EXPECT_TRUE(tiny.due());

  // The two sides together: a sender never has more in flight than the window, and it always
  // gets going again once the target has published.
  SendCredits s(8);
  ReturnCredits t(8);
  uint64_t in_flight = 0, delivered = 0;
  for (int step = 0; step < 1000; ++step) {
    while (s.can_send()) {
      s.on_sent();
      ++in_flight;
    }
    ASSERT_LE(in_flight, 8u);
    const uint64_t arrive = 1 + step % 3;  // the target handles a few, then publishes
    for (uint64_t i = 0; i < arrive && in_flight > 0; ++i, --in_flight, ++delivered) {
      t.on_reposted();
    }
    if (t.due() || in_flight == 0) {
      ASSERT_TRUE(s.update(t.publish()));
    }
  }
  EXPECT_GT(delivered, 1000u);
}

}  // namespace
}  // namespace eagercomm::verbs
