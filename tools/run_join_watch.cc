#include "tools/run_join_watch.h"

#include <chrono>
#include <utility>

namespace eagercomm::run {

Result<std::unique_ptr<JoinWatch>> JoinWatch::connect(uint16_t port, const std::string& token,
                                                      const std::string& job_id) {
  // The server is this process's and already listening: a connect either works at once or not.
  EC_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store,
                      TcpStore::connect("127.0.0.1", port, token, std::chrono::seconds(10)));
  // CommunicatorOptions::scope's default, as Communicator::from_env() extends it.
  return std::unique_ptr<JoinWatch>(new JoinWatch(std::move(store), "eagercomm/" + job_id));
}

void JoinWatch::report_gone(int rank, const std::string& why) {
  const std::string p = scope_ + "/failed";
  (void)store_->set(p + "/" + std::to_string(rank), to_bytes(why));
  (void)store_->add(p, 1);
}

bool JoinWatch::has(const std::string& key) {
  return store_->get(scope_ + "/" + key, std::chrono::milliseconds(1)).ok();
}

}  // namespace eagercomm::run
