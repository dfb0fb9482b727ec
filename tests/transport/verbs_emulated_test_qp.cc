// verbs_emulated_test (tests/transport/verbs_emulated_test.cc), queue pairs: a stale queue
// pair cannot reach the one that reused its number, a GID type mismatch is refused, the
// attributes follow the config table on both connection paths.
#include <gtest/gtest.h>

#include "runtime/build_config.h"

#if EAGERCOMM_HAVE_VERBS

#include "tests/transport/verbs_emulated_test.h"

namespace eagercomm::test::verbs_emulated_test {
namespace {

// A raw RC queue pair on the emulated device, for what the transport cannot show.
struct RawQp {
  const verbs::VerbsApi& api = verbs::emulated_verbs_api();
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  uint32_t lid = 0;
  RawQp() {
    int n = 0;
    ibv_device** list = api.get_device_list(&n);
    ctx = api.open_device(list[0]);
    api.free_device_list(list);
    pd = api.alloc_pd(ctx);
    cq = api.create_cq(ctx, 64, nullptr, nullptr, 0);
    ibv_port_attr pa{};
    api.query_port(ctx, 1, &pa);
    lid = pa.lid;
    make_qp();
  }
  void make_qp() {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp = api.create_qp(pd, &ia);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = verbs::kQpAccess;
    EXPECT_EQ(
        api.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        0);
  }
  void connect(const RawQp& to) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = to.qp->qp_num;
    a.ah_attr.dlid = static_cast<uint16_t>(to.lid);
    a.ah_attr.port_num = 1;
    EXPECT_EQ(api.modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 8;  // 1 ms per try
    a.retry_cnt = 2;
    a.rnr_retry = 0;
    EXPECT_EQ(api.modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }
  // The next completion, waiting up to 10 s.
  std::optional<ibv_wc> next() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc{};
      if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
      std::this_thread::sleep_for(100us);
    }
    return std::nullopt;
  }
  ~RawQp() {
    if (qp != nullptr) api.destroy_qp(qp);
    api.destroy_cq(cq);
    api.dealloc_pd(pd);
    api.close_device(ctx);
  }
};

// A QP still connected to a QP that was destroyed must not reach the QP that took over its
// number (ports and QP numbers are reused): its packets are dropped and it fails with RETRY_EXC,
// as a stale requester does on a fabric. (The emulator once placed them: a multi-process test
// saw another communicator's writes land in its own memory.)
TEST(VerbsEmulated, AStaleQueuePairCannotReachTheQueuePairThatReusedItsNumber) {
  RawQp a, b, c;
  a.connect(b);
  b.connect(a);
  const uint32_t old_qpn = b.qp->qp_num;
  ASSERT_EQ(b.api.destroy_qp(b.qp), 0);
  b.make_qp();  // the lowest free number: the destroyed one's
  ASSERT_EQ(b.qp->qp_num, old_qpn);
  b.connect(c);
  c.connect(b);
  std::vector<uint8_t> target(64, 0);
  ibv_mr* mr = b.api.reg_mr(b.pd, target.data(), target.size(), verbs::kQpAccess);
  ASSERT_NE(mr, nullptr);
  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(b.qp, &rwr, &rbad), 0);
  std::vector<uint8_t> payload(8, 0xab);
  ibv_mr* source = a.api.reg_mr(a.pd, payload.data(), payload.size(), verbs::kQpAccess);
  ASSERT_NE(source, nullptr);
  ibv_sge sge{reinterpret_cast<uintptr_t>(payload.data()), 8, source->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(target.data());
  wr.wr.rdma.rkey = mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  const std::optional<ibv_wc> done = a.next();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->status, IBV_WC_RETRY_EXC_ERR) << a.api.wc_status_str(done->status);
  EXPECT_EQ(target[0], 0) << "a stale QP's write landed";
  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(b.cq, 1, &wc), 0) << "a stale QP's write consumed a receive";
  b.api.dereg_mr(mr);
  a.api.dereg_mr(source);
}

// Defect 8: the GID type travels in the address, and a RoCE v1 / v2 mismatch is refused with
// both named (their packets would never reach each other's QPs).
TEST(VerbsEmulated, AGidTypeMismatchIsRefusedNamingBoth) {
  Config config = emulated();
  config.ib_gid_index = 0;  // GIDs on both sides (the emulated port's only entry)
  std::vector<std::unique_ptr<Transport>> t;
  for (int r = 0; r < 2; ++r) {
    TransportParams params{r, 2, &config, nullptr, "emu-test", false};
    auto made = create_transport("verbs", params);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    t.push_back(std::move(made.value()));
  }
  auto a = verbs::decode_address(t[1]->local_address(), 1, 2);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(a.value().use_gid);
  a.value().gid_roce_v2 = !a.value().gid_roce_v2;
  const Status s = t[0]->connect(1, verbs::encode_address(a.value()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("RoCE v2 GID"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("RoCE v1 GID"), std::string::npos) << s.to_string();
  EXPECT_TRUE(t[0]->connect(1, t[1]->local_address()).ok()) << "the same type connects";
}

// The cm path on the emulated rdma_cm: the CM's attributes are overridden where they must match
// the store path (defect 10: its min_rnr_timer of 0 is 655 ms per RNR retry; defect 9: timeouts).
TEST(VerbsEmulated, TheCmPathSetsTheSameQueuePairAttributesAsTheStorePath) {
  Config config = emulated();
  config.ib_connect = IbConnectMode::kCm;
  config.ib_mtu = IbMtu::k2048;
  World w = world_with_a_write(2, config, 0, 1);
  ASSERT_TRUE(w.ok);
  auto& t = w.t;
  auto& seen = w.seen;
  ASSERT_TRUE(drive(t, seen, [&] { return count(seen[1], TransportCompletion::Kind::kNotify); }));
  for (int from : {0, 1}) {
    auto a = verbs::emu::qp_attributes(qp_of(t, from, 1 - from));
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(a.value().state, IBV_QPS_RTS);
    EXPECT_EQ(a.value().min_rnr_timer, 12u) << "rank " << from << ": the CM's 0 must not stay";
    EXPECT_EQ(a.value().timeout, 18) << "the CM's 14 must not stay";
    EXPECT_EQ(a.value().retry_cnt, 7);
    EXPECT_EQ(a.value().rnr_retry, 7);
    EXPECT_EQ(a.value().path_mtu, IBV_MTU_2048) << "EAGERCOMM_IB_MTU caps the path record's";
  }
}

// Defect 9: the ACK timeout, retry count and SL come from the config table (they were hard-coded)
// and min_rnr_timer is the store path's 12 (defect 10 for the cm path: apply_qp_settings below).
TEST(VerbsEmulated, QueuePairAttributesFollowTheConfigTable) {
  Config config = emulated();
  for (const bool defaults : {true, false}) {
    if (!defaults) {
      config.ib_timeout = 12;
      config.ib_retry_cnt = 5;
      config.ib_sl = 3;
      config.ib_mtu = IbMtu::k1024;
    }
    auto t = connected_world(2, config);
    ASSERT_EQ(t.size(), 2u);
    std::vector<std::vector<TransportCompletion>> seen(2);
    Route r = route(t, 0, 1, 64);
    ASSERT_NE(r.remote, nullptr);
    ASSERT_TRUE(post(t, seen, [&] { return t[0]->write(*r.src, 0, *r.remote, 0, 8, 1, 1); }).ok());
    auto a = verbs::emu::qp_attributes(qp_of(t, 0, 1));
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(a.value().state, IBV_QPS_RTS);
    EXPECT_EQ(a.value().timeout, defaults ? 18 : 12);
    EXPECT_EQ(a.value().retry_cnt, defaults ? 7 : 5);
    EXPECT_EQ(a.value().sl, defaults ? 0 : 3);
    EXPECT_EQ(a.value().path_mtu, defaults ? IBV_MTU_4096 : IBV_MTU_1024)
        << "the ports' 4096, or EAGERCOMM_IB_MTU below it";
    EXPECT_EQ(a.value().rnr_retry, 7);
    EXPECT_EQ(a.value().min_rnr_timer, 12u);
    EXPECT_EQ(a.value().pkey_index, 0);
  }
}

// The cm path takes rdma_init_qp_attr()'s attributes and overrides what must match the store
// path: min_rnr_timer (the CM's 0 is 655 ms per RNR retry), timeouts, access (defect 10).
TEST(VerbsQpSettings, OverrideTheConnectionManagersAttributes) {
  Config config;
  config.ib_timeout = 16;
  config.ib_retry_cnt = 6;
  config.ib_tc = 106;  // DSCP 26 (a lossless class), ECN capable
  const verbs::QpSettings s = verbs::qp_settings(config);
  EXPECT_FALSE(s.sl.has_value()) << "auto: the path record's SL";
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.pkey_index = 5;  // the CM's, kept
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  verbs::apply_qp_settings(s, init, mask);
  EXPECT_EQ(init.pkey_index, 5);
  EXPECT_EQ(init.qp_access_flags, verbs::kQpAccess);
  EXPECT_TRUE(mask & IBV_QP_ACCESS_FLAGS);
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.min_rnr_timer = 0;
  rtr.ah_attr.sl = 2;
  rtr.ah_attr.is_global = 1;
  mask = IBV_QP_STATE | IBV_QP_AV;
  verbs::apply_qp_settings(s, rtr, mask);
  EXPECT_EQ(rtr.min_rnr_timer, 12);
  EXPECT_TRUE(mask & IBV_QP_MIN_RNR_TIMER);
  EXPECT_EQ(rtr.ah_attr.sl, 2) << "the path's SL stays when EAGERCOMM_IB_SL is auto";
  EXPECT_EQ(rtr.ah_attr.grh.traffic_class, 106);
  // The path MTU: EAGERCOMM_IB_MTU caps the path record's, never raises it.
  config.ib_mtu = IbMtu::k1024;
  const verbs::QpSettings capped = verbs::qp_settings(config);
  for (const auto& [path, expect] :
       {std::pair{IBV_MTU_4096, IBV_MTU_1024}, std::pair{IBV_MTU_1024, IBV_MTU_1024},
        std::pair{IBV_MTU_512, IBV_MTU_512}}) {
    rtr.path_mtu = path;
    mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU;
    verbs::apply_qp_settings(capped, rtr, mask);
    EXPECT_EQ(rtr.path_mtu, expect) << "path MTU code " << path;
    EXPECT_TRUE(mask & IBV_QP_PATH_MTU);
  }
  rtr.path_mtu = IBV_MTU_4096;
  verbs::apply_qp_settings(s, rtr, mask);
  EXPECT_EQ(rtr.path_mtu, IBV_MTU_4096) << "auto leaves the path's MTU";
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.timeout = 14;
  mask = IBV_QP_STATE;
  verbs::apply_qp_settings(s, rts, mask);
  EXPECT_EQ(rts.timeout, 16);
  EXPECT_EQ(rts.retry_cnt, 6);
  EXPECT_EQ(rts.rnr_retry, 7);
  EXPECT_EQ(mask & (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY),
            IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
}

}  // namespace
}  // namespace eagercomm::test::verbs_emulated_test

#endif  // EAGERCOMM_HAVE_VERBS
