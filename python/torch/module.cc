// eagercomm._torch: the torch side of eagercomm's Python package.
//   ProcessGroupEagercomm   the "eagercomm" torch.distributed backend (process_group.h)
//   Communicator            a communicator handle (from a process group, or from the launcher's
//                           environment) for the two below; module-local so that it cannot clash
//                           with eagercomm._core's own binding of the same C++ class
//   _EagerSgd               sgd::EagerSgd over two flat float32 tensors (eagercomm.torch.EagerSGD)
//   _PartialAllreduce       one DDP bucket's partial allreduce (partial_allreduce_hook)
// Blocking calls release the GIL: other Python threads (and torch's) keep running.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/partial_allreduce.h"
#include "python/py_interrupt.h"
#include "python/torch/process_group.h"
#include "python/torch/tensor_checks.h"
#include "sgd/eager_sgd.h"

namespace py = pybind11;

namespace eagercomm::torchext {
namespace {

// A holder that drops its reference without the GIL (as torch's own process groups do): the
// group's destructor joins its completion thread, which may be running a future callback that
// needs the GIL.
template <typename T>
class NoGilDestructor {
 public:
  NoGilDestructor() = default;
  NoGilDestructor(const NoGilDestructor&) = default;
  NoGilDestructor(NoGilDestructor&&) noexcept = default;
  NoGilDestructor& operator=(const NoGilDestructor&) = default;
  NoGilDestructor& operator=(NoGilDestructor&&) noexcept = default;
  NoGilDestructor(c10::intrusive_ptr<T> impl) : impl_(std::move(impl)) {}  // NOLINT
  explicit NoGilDestructor(T* impl) : impl_(c10::intrusive_ptr<T>::unsafe_steal_from_new(impl)) {}
  ~NoGilDestructor() {
    if (impl_ && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      impl_.reset();
    }
  }
  T& operator*() const noexcept { return *impl_; }
  T* operator->() const noexcept { return impl_.get(); }
  T* get() const noexcept { return impl_.get(); }

 private:
  c10::intrusive_ptr<T> impl_;
};

}  // namespace
}  // namespace eagercomm::torchext

PYBIND11_DECLARE_HOLDER_TYPE(T, eagercomm::torchext::NoGilDestructor<T>, true);

namespace eagercomm::torchext {
namespace {

using Seconds = std::chrono::duration<double>;

// Raises a Status as the Python exception that fits it; KeyboardInterrupt instead when a Ctrl-C
// came while the call ran (left pending, it would fire inside the traceback printer, which then
// gives up with "lost sys.stderr"). With or without the GIL.
[[noreturn]] void raise(const Status& s, const std::string& context) {
  signals::Interrupt interrupt;
  if (interrupt.check()) interrupt.rethrow();
  const std::string msg = context + ": " + s.to_string();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      throw py::value_error(msg);
    case StatusCode::kNotSupported:
      throw c10::NotImplementedError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
    default:
      throw std::runtime_error(msg);
  }
}

// A timeout in seconds as eagercomm's Python module takes it (communicator.h, "Timeouts"): 0 is
// EAGERCOMM_TIMEOUT, WAIT_FOREVER (math.inf) and -1 no limit; NaN and other negatives refused.
std::chrono::nanoseconds to_timeout(double seconds, const char* what) {
  if (seconds == 0) return kConfiguredTimeout;
  if (seconds == -1) return kWaitForever;
  if (!(seconds > 0)) {
    throw py::value_error(std::string(what) + ": timeout " + std::to_string(seconds) +
                          " is not a number of seconds (eagercomm.WAIT_FOREVER: no limit, 0: "
                          "EAGERCOMM_TIMEOUT)");
  }
  if (seconds * 1e9 >= static_cast<double>(kWaitForever.count())) return kWaitForever;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Seconds(seconds));
}

// A flat float32 buffer the C++ side reads and writes through a raw pointer.
void check_flat(const at::Tensor& t, const char* what, const char* name) {
  check_tensor(t, what);
  if (t.scalar_type() != at::kFloat) {
    throw py::type_error(std::string(what) + ": " + name + " must be float32, got " +
                         std::string(c10::toString(t.scalar_type())));
  }
  if (!t.is_contiguous() || t.dim() != 1) {
    throw py::value_error(std::string(what) + ": " + name +
                          " must be a contiguous 1-D tensor (the flat buffer)");
  }
}

PartialOptions partial_options(const std::string& late, uint32_t sync_every, uint64_t seed,
                               uint32_t result_depth, const char* what) {
  PartialOptions o;
  if (late == "carry") {
    o.late = LatePolicy::kCarry;
  } else if (late == "drop") {
    o.late = LatePolicy::kDrop;
  } else {
    throw py::value_error(std::string(what) + ": late='" + late + "' is not 'carry' or 'drop'");
  }
  o.sync_every = sync_every;
  o.seed = seed;
  o.result_depth = result_depth;
  return o;
}

PartialMode mode_of(const std::string& text, const char* what) {
  Result<PartialMode> mode = parse_partial_mode(text);
  if (!mode.ok()) raise(mode.status(), std::string(what) + ": mode '" + text + "'");
  return mode.value();
}

OnFailure on_failure_of(const std::string& text, const char* what) {
  Result<OnFailure> failure = parse_on_failure(text);
  if (!failure.ok()) throw py::value_error(std::string(what) + ": " + failure.status().message());
  return failure.value();
}

py::dict round_info(const RoundResult& r) {
  py::dict d;
  d["round"] = r.round();
  d["fresh"] = r.fresh_count();
  d["contributors"] = r.contributors();
  d["max_age"] = r.max_age();
  return d;
}

// sgd::EagerSgd over tensors Python owns; keeps them (and the communicator) alive.
class EagerSgdHandle {
 public:
  EagerSgdHandle(std::shared_ptr<Communicator> comm, at::Tensor params, at::Tensor grads,
                 const sgd::SgdOptions& options)
      : comm_(std::move(comm)), params_(std::move(params)), grads_(std::move(grads)) {
    Result<std::unique_ptr<sgd::EagerSgd>> opt = sgd::EagerSgd::create(
        *comm_, params_.data_ptr<float>(), grads_.data_ptr<float>(),
        static_cast<size_t>(params_.numel()), sgd::MemoryKind::kHost, options);
    if (!opt.ok()) raise(opt.status(), "EagerSGD");
    opt_ = std::move(opt).value();
  }
  void step() {
    Status s = opt_->step();
    if (!s.ok()) raise(s, "EagerSGD.step");
  }
  void finish() {
    Status s = opt_->finish();
    if (!s.ok()) raise(s, "EagerSGD.finish");
  }
  const sgd::EagerSgd& opt() const { return *opt_; }

 private:
  std::shared_ptr<Communicator> comm_;
  at::Tensor params_, grads_;
  std::unique_ptr<sgd::EagerSgd> opt_;
};

// One bucket's partial allreduce for the DDP hook (semantics in docs/TORCH.md).
class PartialHandle {
 public:
  PartialHandle(std::shared_ptr<Communicator> comm, size_t count, PartialMode mode,
                const PartialOptions& options, std::chrono::nanoseconds timeout)
      : comm_(std::move(comm)), count_(count), timeout_(timeout) {
    Result<std::unique_ptr<PartialAllreduce>> pa =
        PartialAllreduce::create(*comm_, count, DataType::kFloat32, mode, options);
    if (!pa.ok()) raise(pa.status(), "partial_allreduce_hook");
    pa_ = std::move(pa).value();
  }

  // Posts `t` and replaces it with the next round's result (waiting only when none is ready).
  py::dict exchange(at::Tensor& t) {
    check(t);
    std::optional<RoundResult> r;
    {
      py::gil_scoped_release nogil;
      Status s = pa_->post(t.data_ptr<float>(), count_, DataType::kFloat32);
      if (!s.ok()) raise(s, "partial_allreduce_hook: post");
      Result<std::optional<RoundResult>> polled = pa_->poll();
      if (!polled.ok()) raise(polled.status(), "partial_allreduce_hook: poll");
      if (polled.value()) {
        r = std::move(*polled.value());
      } else {
        Result<RoundResult> waited = pa_->wait(timeout_);
        if (!waited.ok()) raise(waited.status(), "partial_allreduce_hook: wait");
        r = std::move(waited).value();
      }
      std::memcpy(t.data_ptr<float>(), r->data(), count_ * sizeof(float));
    }
    return round_info(*r);  // r is released when it goes out of scope: back-pressure lifts
  }

  // Collective: flushes; `out` = the sum of every result until the flush round. Returns how
  // many results there were.
  int flush_into(at::Tensor& out) {
    check(out);
    int n = 0;
    {
      py::gil_scoped_release nogil;
      float* o = out.data_ptr<float>();
      std::fill(o, o + count_, 0.0f);
      Result<uint64_t> f = pa_->flush([&](RoundResult&& r) {
        std::span<const float> g = r.as<float>();
        for (size_t i = 0; i < count_; ++i) o[i] += g[i];
        ++n;
      });
      if (!f.ok()) raise(f.status(), "partial_allreduce_hook: flush");
    }
    return n;
  }

  py::dict stats() const {
    // Every post (dropped ones included: PartialStats counts only posts that added data).
    const PartialStats s = pa_->stats();
    py::dict d;
    d["posts"] = s.posts + s.dropped_posts;
    d["late_posts"] = s.late_posts + s.dropped_posts;
    d["dropped_posts"] = s.dropped_posts;
    d["rounds_activated"] = s.rounds_activated;
    d["rounds_delivered"] = s.rounds_delivered;
    return d;
  }
  size_t count() const { return count_; }

 private:
  void check(const at::Tensor& t) const {
    check_flat(t, "partial_allreduce_hook", "the bucket");
    if (static_cast<size_t>(t.numel()) != count_) {
      throw py::value_error("partial_allreduce_hook: the bucket has " + std::to_string(t.numel()) +
                            " elements; this object was made for " + std::to_string(count_));
    }
  }

  std::shared_ptr<Communicator> comm_;
  size_t count_;
  std::chrono::nanoseconds timeout_;
  std::unique_ptr<PartialAllreduce> pa_;
};

py::dict sgd_stats(const sgd::EagerSgd& o) {
  const sgd::SgdStats& s = o.stats();
  py::dict d;
  d["steps"] = s.steps;
  d["rounds_applied"] = s.rounds_applied;
  d["empty_rounds"] = s.empty_rounds;
  d["fresh_posts"] = s.fresh_posts;
  d["late_posts"] = s.late_posts;
  d["blocking_steps"] = s.blocking_steps;
  d["fresh_fraction"] = s.fresh_fraction(o.size());
  d["mean_staleness"] = s.mean_staleness();
  d["max_staleness"] = s.max_staleness();
  d["mean_momentum"] = s.mean_momentum();
  d["mean_lr"] = s.mean_lr();
  d["computing_s"] = Seconds(s.computing).count();
  d["waiting_s"] = Seconds(s.waiting).count();
  d["applying_s"] = Seconds(s.applying).count();
  return d;
}

}  // namespace
}  // namespace eagercomm::torchext

PYBIND11_MODULE(_torch, m) {
  using namespace eagercomm;
  using namespace eagercomm::torchext;
  m.doc() = "eagercomm's torch.distributed backend, EagerSGD and the DDP partial-allreduce hook";
  m.attr("built_with_torch") = TORCH_VERSION;
  // ProcessGroupEagercomm's base class is bound by torch.distributed: load it first.
  py::module_::import("torch.distributed");

  // The backend's tensor check, for tests: torch's dispatcher refuses meta tensors before a
  // backend sees them, and a CPU-only torch has no CUDA tensor to show the device check.
  m.def(
      "_check_tensor",
      [](const at::Tensor& t, const std::string& op) {
        return std::string(dtype_name(check_tensor(t, op.c_str())));
      },
      py::arg("tensor"), py::arg("op"));

  py::class_<Communicator, std::shared_ptr<Communicator>>(m, "Communicator", py::module_local())
      .def_static(
          "from_env",
          [] {
            Result<std::unique_ptr<Communicator>> c = [] {
              py::gil_scoped_release nogil;
              return Communicator::from_env();
            }();
            if (!c.ok()) raise(c.status(), "eagercomm communicator from the environment");
            return std::shared_ptr<Communicator>(std::move(c).value());
          },
          "Joins the job this process was started in (eagercomm-run, torchrun, mpirun, srun).")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("transport", &Communicator::transport_name)
      .def(
          "barrier",
          [](Communicator& c) {
            Status s = c.barrier();
            if (!s.ok()) raise(s, "barrier");
          },
          py::call_guard<py::gil_scoped_release>())
      .def("__repr__", [](const Communicator& c) {
        return "<eagercomm Communicator rank " + std::to_string(c.rank()) + " of " +
               std::to_string(c.size()) + " over " + c.transport_name() + ">";
      });

  py::class_<ProcessGroupEagercomm, BackendBase, NoGilDestructor<ProcessGroupEagercomm>>(
      m, "ProcessGroupEagercomm")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             c10::intrusive_ptr<ProcessGroupEagercomm> pg;
             {
               py::gil_scoped_release nogil;
               pg = ProcessGroupEagercomm::create(store, rank, size, timeout);
             }
             return NoGilDestructor<ProcessGroupEagercomm>(std::move(pg));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"))
      .def("_communicator", &ProcessGroupEagercomm::communicator)
      .def_property_readonly("timeout_ms",
                             [](const ProcessGroupEagercomm& pg) { return pg.timeout().count(); });

  py::class_<EagerSgdHandle>(m, "_EagerSgd")
      .def(py::init([](std::shared_ptr<Communicator> comm, at::Tensor params, at::Tensor grads,
                       const std::string& mode, double lr, double momentum, double weight_decay,
                       uint64_t warmup_rounds, double warmup_start,
                       std::vector<uint64_t> milestones, double gamma, const std::string& late,
                       uint32_t sync_every, uint64_t seed, uint32_t result_depth, double timeout_s,
                       bool broadcast_initial, const std::string& staleness, double solo_speedup,
                       const std::string& on_failure) {
             if (!comm) throw py::value_error("EagerSGD: no communicator");
             check_flat(params, "EagerSGD", "the parameter buffer");
             check_flat(grads, "EagerSGD", "the gradient buffer");
             if (params.numel() != grads.numel()) {
               throw py::value_error("EagerSGD: parameter and gradient buffers differ in size");
             }
             sgd::SgdOptions o;
             o.mode = mode_of(mode, "EagerSGD");
             o.partial = partial_options(late, sync_every, seed, result_depth, "EagerSGD");
             o.lr.base = lr;
             o.lr.warmup_rounds = warmup_rounds;
             o.lr.warmup_start = warmup_start;
             o.lr.milestones = std::move(milestones);
             o.lr.gamma = gamma;
             o.momentum = momentum;
             o.weight_decay = weight_decay;
             Result<sgd::StalenessRule> rule = sgd::parse_staleness_rule(staleness);
             if (!rule.ok()) throw py::value_error("EagerSGD: " + rule.status().message());
             o.staleness = rule.value();
             if (!(solo_speedup >= 1 && solo_speedup <= PartialOptions::kMaxSoloSpeedup)) {
               throw py::value_error("EagerSGD: solo_speedup " + std::to_string(solo_speedup) +
                                     " is not in [1, " +
                                     std::to_string(PartialOptions::kMaxSoloSpeedup) + "]");
             }
             o.partial.solo_speedup = solo_speedup;
             o.partial.on_failure = on_failure_of(on_failure, "EagerSGD");
             o.broadcast_initial = broadcast_initial;
             o.timeout = to_timeout(timeout_s, "EagerSGD");
             py::gil_scoped_release nogil;  // create() is collective
             return std::make_unique<EagerSgdHandle>(std::move(comm), params, grads, o);
           }),
           py::arg("comm"), py::arg("params"), py::arg("grads"), py::arg("mode"), py::arg("lr"),
           py::arg("momentum"), py::arg("weight_decay"), py::arg("warmup_rounds"),
           py::arg("warmup_start"), py::arg("milestones"), py::arg("gamma"), py::arg("late"),
           py::arg("sync_every"), py::arg("seed"), py::arg("result_depth"), py::arg("timeout_s"),
           py::arg("broadcast_initial"), py::arg("staleness") = "momentum",
           py::arg("solo_speedup") = PartialOptions{}.solo_speedup, py::arg("on_failure") = "fail")
      .def("step", &EagerSgdHandle::step, py::call_guard<py::gil_scoped_release>())
      .def("finish", &EagerSgdHandle::finish, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const EagerSgdHandle& h) { return sgd_stats(h.opt()); })
      .def_property_readonly("version", [](const EagerSgdHandle& h) { return h.opt().version(); })
      .def_property_readonly("current_momentum",
                             [](const EagerSgdHandle& h) { return h.opt().current_momentum(); })
      .def_property_readonly("current_lr",
                             [](const EagerSgdHandle& h) { return h.opt().current_lr(); })
      .def_property_readonly("mode",
                             [](const EagerSgdHandle& h) { return h.opt().options().mode.name(); });

  py::class_<PartialHandle>(m, "_PartialAllreduce")
      .def(py::init([](std::shared_ptr<Communicator> comm, size_t count, const std::string& mode,
                       const std::string& late, uint32_t sync_every, uint64_t seed,
                       uint32_t result_depth, double timeout_s, const std::string& on_failure) {
             if (!comm) throw py::value_error("partial_allreduce_hook: no communicator");
             PartialMode pm = mode_of(mode, "partial_allreduce_hook");
             PartialOptions po =
                 partial_options(late, sync_every, seed, result_depth, "partial_allreduce_hook");
             po.on_failure = on_failure_of(on_failure, "partial_allreduce_hook");
             auto timeout = to_timeout(timeout_s, "partial_allreduce_hook");
             py::gil_scoped_release nogil;  // create() is collective
             return std::make_unique<PartialHandle>(std::move(comm), count, pm, po, timeout);
           }),
           py::arg("comm"), py::arg("count"), py::arg("mode"), py::arg("late"),
           py::arg("sync_every"), py::arg("seed"), py::arg("result_depth"), py::arg("timeout_s"),
           py::arg("on_failure") = "fail")
      .def("exchange", &PartialHandle::exchange)
      .def("flush_into", &PartialHandle::flush_into)
      .def("stats", &PartialHandle::stats)
      .def_property_readonly("count", &PartialHandle::count);
}
