// ucx_transport_test (tests/transport/ucx_transport_test.cc), bad input: clear errors, in one
// process holding a few transports.
#include <gtest/gtest.h>

#include "runtime/build_config.h"

#if EAGERCOMM_HAVE_UCX

#include "tests/transport/ucx_transport_test.h"

namespace eagercomm::test::ucx_test {
namespace {

// ---- Bad input: clear errors, in one process holding a few transports ----

bool contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(UcxTransport, BadInputGivesClearErrors) {
  run_world(
      1, Tls::kShm,
      [](Ctx& c) {
        HashStore store;
        Config config;
        auto make = [&](int rank) {
          TransportParams p{rank, 2, &config, &store, "bad"};
          UcxTransportOptions o;
          o.close_timeout = 100ms;  // nobody drives the peers here: do not wait for goodbyes
          auto t = create_ucx_transport(p, o);
          EXPECT_TRUE(t.ok()) << t.status().to_string();
          return t.ok() ? std::move(t).value() : nullptr;
        };
        {
          TransportParams p{2, 2, &config, &store, "bad"};
          auto t = create_ucx_transport(p);
          ASSERT_FALSE(t.ok());
          EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
          EXPECT_TRUE(contains(t.status(), "rank 2 is not in a world of size 2"))
              << t.status().to_string();
          TransportParams q{0, 0, &config, &store, "bad"};
          EXPECT_EQ(create_ucx_transport(q).status().code(), StatusCode::kInvalidArgument);
        }
        auto a = make(0), b = make(1), b2 = make(1);
        ASSERT_TRUE(a && b && b2);
        (void)c;

        // Memory.
        auto r0 = a->allocate(0, MemoryKind::kHost);
        EXPECT_EQ(r0.status().code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(r0.status(), "0 bytes")) << r0.status().to_string();
        auto cuda = a->allocate(64, MemoryKind::kCuda);
        EXPECT_EQ(cuda.status().code(), StatusCode::kNotSupported);
        EXPECT_TRUE(contains(cuda.status(), "cuda")) << cuda.status().to_string();
        std::vector<uint8_t> buf(4096);
        auto null_reg = a->register_memory(nullptr, 64, MemoryKind::kHost);
        EXPECT_EQ(null_reg.status().code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(null_reg.status(), "null pointer")) << null_reg.status().to_string();
        EXPECT_EQ(a->register_memory(buf.data(), 0, MemoryKind::kHost).status().code(),
                  StatusCode::kInvalidArgument);
        EXPECT_EQ(a->register_memory(buf.data(), 64, MemoryKind::kCuda).status().code(),
                  StatusCode::kNotSupported);
        auto region_a = a->allocate(4096, MemoryKind::kHost);
        auto region_b = b->allocate(4096, MemoryKind::kHost);
        auto region_b2 = b2->allocate(4096, MemoryKind::kHost);
        ASSERT_TRUE(region_a.ok() && region_b.ok() && region_b2.ok());
        for (size_t i = 0; i < 4096; ++i) {
          ASSERT_EQ(static_cast<uint8_t*>(region_a.value()->data())[i], 0) << "not zero-filled";
        }

        // Addresses.
        const std::vector<uint8_t> addr_b = b->local_address();
        Status s = a->connect(5, addr_b);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(s, "peer rank 5 out of range [0, 2)")) << s.to_string();
        s = a->connect(1, std::vector<uint8_t>(10, 7));
        EXPECT_EQ(s.code(), StatusCode::kProtocolError);
        EXPECT_TRUE(contains(s, "less than its")) << s.to_string();
        std::vector<uint8_t> garbage(200, 0x11);
        s = a->connect(1, garbage);
        EXPECT_EQ(s.code(), StatusCode::kProtocolError);
        EXPECT_TRUE(contains(s, "not a ucx address")) << s.to_string();
        s = a->connect(0, addr_b);
        EXPECT_EQ(s.code(), StatusCode::kProtocolError);
        EXPECT_TRUE(contains(s, "address of rank 1 was given as rank 0's")) << s.to_string();
        std::vector<uint8_t> cut(addr_b.begin(), addr_b.end() - 1);
        s = a->connect(1, cut);
        EXPECT_EQ(s.code(), StatusCode::kProtocolError);
        EXPECT_TRUE(contains(s, "truncated or corrupt")) << s.to_string();
        std::vector<uint8_t> flipped = addr_b;
        flipped.back() ^= 0x40;
        EXPECT_EQ(a->connect(1, flipped).code(), StatusCode::kProtocolError);

        // Before connecting: importing and sending are refused.
        auto early = a->import_region(1, region_b.value()->remote_key());
        EXPECT_EQ(early.status().code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(early.status(), "rank 1 is not connected"))
            << early.status().to_string();
        s = a->notify(1, 1);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(s, "not connected")) << s.to_string();
        s = a->notify(-1, 1);
        EXPECT_TRUE(contains(s, "peer rank -1 out of range")) << s.to_string();

        ASSERT_TRUE(a->connect(1, addr_b).ok());
        EXPECT_TRUE(a->connect(1, addr_b).ok()) << "connect() is not idempotent";
        s = a->connect(1, b2->local_address());
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(s, "already connected with a different address")) << s.to_string();

        // Keys.
        auto bad_key = [&](std::vector<uint8_t> key, StatusCode code, const std::string& text) {
          auto r = a->import_region(1, key);
          EXPECT_FALSE(r.ok());
          EXPECT_EQ(r.status().code(), code) << r.status().to_string();
          EXPECT_TRUE(contains(r.status(), text)) << r.status().to_string();
        };
        const std::vector<uint8_t> key_b = region_b.value()->remote_key();
        bad_key({}, StatusCode::kProtocolError, "has 0 bytes");
        bad_key(std::vector<uint8_t>(100, 0), StatusCode::kProtocolError, "not a ucx key");
        bad_key(region_a.value()->remote_key(), StatusCode::kProtocolError,
                "remote key of rank 0's memory was given as rank 1's");
        bad_key(region_b2.value()->remote_key(), StatusCode::kProtocolError,
                "another transport instance");
        bad_key(std::vector<uint8_t>(key_b.begin(), key_b.end() - 1), StatusCode::kProtocolError,
                "truncated or corrupt");
        std::vector<uint8_t> corrupt = key_b;
        corrupt.back() ^= 1;
        bad_key(corrupt, StatusCode::kProtocolError, "truncated or corrupt");
        Transports inproc(2, "ucx-bad");
        auto inproc_region = inproc[0].allocate(4096, MemoryKind::kHost);
        ASSERT_TRUE(inproc_region.ok());
        bad_key(inproc_region.value()->remote_key(), StatusCode::kProtocolError, "less than its");
        EXPECT_EQ(a->import_region(9, key_b).status().code(), StatusCode::kInvalidArgument);

        auto remote_b = a->import_region(1, key_b);
        ASSERT_TRUE(remote_b.ok()) << remote_b.status().to_string();
        EXPECT_EQ(remote_b.value()->size(), 4096u);
        EXPECT_EQ(remote_b.value()->peer(), 1);

        // Writes.
        s = a->write(*region_a.value(), 4000, *remote_b.value(), 0, 200, 1, 1);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(s, "out of bounds")) << s.to_string();
        s = a->write(*region_a.value(), 0, *remote_b.value(), 4095, 2, 1, 1);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        s = a->write(*region_b.value(), 0, *remote_b.value(), 0, 8, 1, 1);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(s, "local region was not made by this ucx transport"))
            << s.to_string();
        s = a->write(*inproc_region.value(), 0, *remote_b.value(), 0, 8, 1, 1);
        EXPECT_TRUE(contains(s, "local region was not made by this ucx transport"))
            << s.to_string();
        auto inproc_remote = inproc[1].import_region(0, inproc_region.value()->remote_key());
        ASSERT_TRUE(inproc_remote.ok());
        s = a->write(*region_a.value(), 0, *inproc_remote.value(), 0, 8, 1, 1);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(s, "remote region was not imported by this ucx transport"))
            << s.to_string();
        EXPECT_EQ(a->mapped_address(*inproc_remote.value()), nullptr);

        // wait(): zero returns at once; a wake() first makes it return at once too.
        auto t0 = Clock::now();
        a->wait(0ns);
        a->wake();
        a->wait(20s);
        EXPECT_LT(Clock::now() - t0, 5s);
      },
      [] {
        WorldOptions wo;
        wo.connect = false;
        return wo;
      }());
}

}  // namespace
}  // namespace eagercomm::test::ucx_test

#endif  // EAGERCOMM_HAVE_UCX
