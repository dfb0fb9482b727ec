// eagercomm._core: the Python binding of the C++ API (communicators, collectives, partial
// allreduce). python/eagercomm/__init__.py re-exports it; docs/EMBEDDING.md describes it.
//
// Blocking calls release the GIL while they wait, so other Python threads run (and may call
// abort()), and look for signals every kSignalCheckEvery (py_interrupt.h): Ctrl-C raises
// KeyboardInterrupt in a waiting call. Buffers are used in place (py_buffers.h) and referenced
// (BufferRef) for the whole call; a collective that times out or is interrupted is abandoned on
// every rank, so nothing touches them after.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional arguments and results

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capi/eagercomm.h"
#include "collectives/communicator.h"
#include "collectives/partial_allreduce.h"
#include "python/py_buffers.h"
#include "python/py_errors.h"
#include "python/py_interrupt.h"

namespace eagercomm::py {
namespace {

namespace pyb = pybind11;
using signals::Interrupt;
using signals::kSignalCheckEvery;
using namespace pybind11::literals;

// The C++ timeout argument for `timeout` in seconds (communicator.h, "Timeouts"): None and 0
// are EAGERCOMM_TIMEOUT (kConfiguredTimeout), WAIT_FOREVER (math.inf) and -1 no limit
// (kWaitForever), as is a limit too long for the clock; NaN and other negatives are refused.
std::chrono::nanoseconds timeout_of(const std::optional<double>& timeout) {
  if (!timeout || *timeout == 0) return kConfiguredTimeout;
  const double s = *timeout;
  if (s == -1) return kWaitForever;
  if (std::isnan(s) || s < 0) {
    raise_value_error("timeout " + pyb::repr(pyb::float_(s)).cast<std::string>() +
                      " is not a number of seconds (eagercomm.WAIT_FOREVER: no limit, None: "
                      "EAGERCOMM_TIMEOUT)");
  }
  if (s * 1e9 >= static_cast<double>(kWaitForever.count())) return kWaitForever;
  return std::chrono::nanoseconds(static_cast<int64_t>(s * 1e9));
}

ReduceOp op_of(const std::string& name) {
  Result<ReduceOp> op = parse_reduce_op(name);
  if (!op.ok()) raise_value_error(op.status().message());
  return op.value();
}

std::string describe(const BufferRef& b) {
  return std::to_string(b.count()) + " x " + long_dtype_name(b.type());
}

// `value` as a Python int (operator.index): InvalidTypeError naming `name` otherwise.
pyb::int_ index_arg(pyb::handle value, const char* name) {
  PyObject* index = PyNumber_Index(value.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    raise_type_error(std::string(name) + " must be an int, got " +
                     pyb::str(pyb::type::handle_of(value).attr("__name__")).cast<std::string>());
  }
  return pyb::reinterpret_steal<pyb::int_>(index);
}

// A count or option in [0, max]: InvalidArgumentError naming it otherwise (pybind11's own
// conversion of a C++ unsigned argument would raise a TypeError listing the signature).
uint64_t uint_arg(pyb::handle value, const char* name, uint64_t max, const char* hint = "") {
  const pyb::int_ i = index_arg(value, name);
  const std::string text = std::string(name) + " " + pyb::repr(i).cast<std::string>();
  const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());  // negative: OverflowError
  if (PyErr_Occurred()) {
    PyErr_Clear();
    if (PyObject_RichCompareBool(i.ptr(), pyb::int_(0).ptr(), Py_LT) == 1) {
      raise_value_error(text + " is negative" + hint);
    }
    raise_value_error(text + " is too large");
  }
  if (u > max) raise_value_error(text + " is too large (at most " + std::to_string(max) + ")");
  return u;
}

// Waits for a started collective with the GIL released, as the blocking C++ calls do (at the
// timeout, resolved, it is abandoned on every rank), but in slices: between them the thread
// looks for signals, and one that raised (Ctrl-C) abandons the collective the same way.
Status wait_abandoning(Request& req, std::chrono::nanoseconds timeout, Interrupt& interrupt) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (;;) {
    std::chrono::nanoseconds slice = kSignalCheckEvery;
    if (timeout > std::chrono::nanoseconds::zero()) {
      const std::chrono::nanoseconds left = timeout - (Clock::now() - start);
      if (left <= std::chrono::nanoseconds::zero()) return req.abandon(timeout);
      slice = std::min(slice, left);
    }
    const Status s = req.wait(slice);
    if (s.code() != StatusCode::kTimeout || req.ready()) return s;
    if (interrupt.check()) {
      // Whole milliseconds: the peers read this in their error ("did not finish within 312ms").
      (void)req.abandon(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start));
      return interrupt.status();
    }
  }
}

// ---- Communicator ----

class PyComm {
 public:
  explicit PyComm(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}

  static std::unique_ptr<PyComm> from_env() {
    Result<std::unique_ptr<Communicator>> comm = [] {
      pyb::gil_scoped_release nogil;
      return Communicator::from_env();
    }();
    check(comm.status());
    return std::make_unique<PyComm>(std::move(comm).value());
  }

  Communicator& comm() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  std::string transport() const { return comm_->transport_name(); }

  pyb::object allreduce(pyb::handle send, pyb::handle recv, const std::string& op,
                        std::optional<double> timeout) {
    const ReduceOp redop = op_of(op);
    const std::chrono::nanoseconds t = timeout_of(timeout);
    const bool in_place = recv.is_none();
    auto s = BufferRef::get(send, in_place ? "buffer" : "send", in_place);
    std::unique_ptr<BufferRef> r;
    if (!in_place) {
      r = BufferRef::get(recv, "recv", true);
      if (r->type() != s->type()) {
        raise_type_error("allreduce: recv holds " + std::string(long_dtype_name(r->type())) +
                         " but send holds " + long_dtype_name(s->type()));
      }
      if (r->count() != s->count()) {
        raise_value_error("allreduce: recv holds " + std::to_string(r->count()) +
                          " elements but send holds " + std::to_string(s->count()));
      }
    }
    const void* in = s->data();
    void* out = in_place ? s->data() : r->data();
    finish([&] { return comm_->allreduce_async(in, out, s->count(), s->type(), redop); }, t);
    return in_place ? s->object() : r->object();
  }

  pyb::object broadcast(pyb::handle buf, pyb::handle root_arg, std::optional<double> timeout) {
    const std::chrono::nanoseconds t = timeout_of(timeout);
    auto b = BufferRef::get(buf, "buffer", true);
    const pyb::int_ wide = index_arg(root_arg, "root");
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(wide.ptr(), &overflow);
    // A root beyond int still goes to the runtime, as -1, which fails the broadcast on every
    // rank (the others must not wait for this one); the error names the root given.
    const bool representable = overflow == 0 && v >= INT_MIN && v <= INT_MAX;
    const int root = representable ? static_cast<int>(v) : -1;
    try {
      finish([&] { return comm_->broadcast_async(b->data(), b->count(), b->type(), root); }, t);
    } catch (pyb::error_already_set& e) {
      if (representable || !e.matches(PyExc_ValueError)) throw;
      raise_value_error("broadcast on rank " + std::to_string(rank()) + ": root " +
                        pyb::repr(wide).cast<std::string>() +
                        " is not a rank of this communicator (size " + std::to_string(size()) +
                        ")");
    }
    return b->object();
  }

  pyb::object allgather(pyb::handle send, pyb::handle recv, std::optional<double> timeout) {
    const std::chrono::nanoseconds t = timeout_of(timeout);
    auto s = BufferRef::get(send, "send", false);
    auto r = BufferRef::get(recv, "recv", true);
    if (r->type() != s->type()) {
      raise_type_error("allgather: recv holds " + std::string(long_dtype_name(r->type())) +
                       " but send holds " + long_dtype_name(s->type()));
    }
    const size_t want = s->count() * static_cast<size_t>(size());
    if (r->count() != want) {
      raise_value_error("allgather: recv holds " + std::to_string(r->count()) +
                        " elements but must hold size x len(send) = " + std::to_string(size()) +
                        " x " + std::to_string(s->count()) + " = " + std::to_string(want));
    }
    finish([&] { return comm_->allgather_async(s->data(), r->data(), s->count(), s->type()); }, t);
    return r->object();
  }

  void barrier(std::optional<double> timeout) {
    const std::chrono::nanoseconds t = timeout_of(timeout);
    finish([&] { return comm_->barrier_async(); }, t);
  }

  void abort(const std::string& reason) {
    pyb::gil_scoped_release nogil;
    comm_->abort(reason);
  }

  std::vector<int> shrink(std::optional<double> timeout) {
    const std::chrono::nanoseconds t = timeout_of(timeout);
    Result<std::vector<int>> members = [&] {
      pyb::gil_scoped_release nogil;
      return comm_->shrink(t);
    }();
    check(members.status());
    return std::move(members).value();
  }
  uint32_t generation() const { return comm_->generation(); }

  void destroy() {
    pyb::gil_scoped_release nogil;
    comm_->destroy();
  }

 private:
  // Starts a collective (`start` returns its Request) and waits for it without the GIL; raises
  // its error, or KeyboardInterrupt when Ctrl-C ended the wait (the collective then abandoned
  // as at a timeout: the peers' calls fail, this communicator stays usable).
  template <class Start>
  void finish(const Start& start, std::chrono::nanoseconds timeout) {
    Interrupt interrupt;
    Status status;
    {
      pyb::gil_scoped_release nogil;
      Result<Request> req = start();
      const std::chrono::nanoseconds total =
          timeout == kConfiguredTimeout ? comm_->configured_timeout() : timeout;
      status = req.ok() ? wait_abandoning(req.value(), total, interrupt) : req.status();
    }
    if (interrupt.raised()) interrupt.rethrow();
    check(status);
  }

  std::unique_ptr<Communicator> comm_;
};

// ---- PartialAllreduce ----

struct PyRound {
  uint64_t round = 0;
  int fresh_count = 0;
  int contributors = 0;
  int max_age = 0;
  pyb::object data;
};

PyRound round_of(const RoundResult& r, pyb::object data) {
  PyRound out;
  out.round = r.round();
  out.fresh_count = r.fresh_count();
  out.contributors = r.contributors();
  out.max_age = r.max_age();
  out.data = std::move(data);
  return out;
}

// A new numpy array holding the round's sum (bfloat16: its bits, as uint16). Needs the GIL.
pyb::object new_array(const RoundResult& r) {
  pyb::array a(pyb::dtype(numpy_format(r.type())),
               std::vector<pyb::ssize_t>{static_cast<pyb::ssize_t>(r.count())});
  if (r.count() > 0) std::memcpy(a.mutable_data(), r.data(), r.count() * dtype_size(r.type()));
  return a;
}

class PyPartial {
 public:
  // The integer arguments are taken as Python objects so that a negative or huge one raises
  // InvalidArgumentError naming it (on this rank, before the collective creation starts).
  PyPartial(pyb::object comm, pyb::handle count_arg, pyb::handle dtype, const std::string& mode,
            const std::string& late, pyb::handle sync_every_arg, pyb::handle seed_arg,
            pyb::handle result_depth_arg, const std::string& on_failure)
      : comm_ref_(std::move(comm)) {
    PyComm& c = comm_ref_.cast<PyComm&>();
    const size_t count = uint_arg(count_arg, "PartialAllreduce: count", INT64_MAX);
    const auto sync_every = static_cast<uint32_t>(uint_arg(
        sync_every_arg, "PartialAllreduce: sync_every", UINT32_MAX, " (0: no synchronous rounds)"));
    const uint64_t seed = uint_arg(seed_arg, "PartialAllreduce: seed", UINT64_MAX);
    const auto result_depth = static_cast<uint32_t>(uint_arg(
        result_depth_arg, "PartialAllreduce: result_depth", UINT32_MAX, " (accepted: 1 .. 1024)"));
    const DataType type = dtype_from_python(dtype);
    Result<PartialMode> m = parse_partial_mode(mode);
    if (!m.ok()) raise_value_error("mode: " + m.status().message());
    PartialOptions options;
    if (late == "carry") {
      options.late = LatePolicy::kCarry;
    } else if (late == "drop") {
      options.late = LatePolicy::kDrop;
    } else {
      raise_value_error("late '" + late + "' is neither 'carry' nor 'drop'");
    }
    options.sync_every = sync_every;
    options.seed = seed;
    options.result_depth = result_depth;
    Result<OnFailure> failure = parse_on_failure(on_failure);
    if (!failure.ok()) raise_value_error(failure.status().message());
    options.on_failure = failure.value();
    Result<std::unique_ptr<PartialAllreduce>> pa = [&] {
      pyb::gil_scoped_release nogil;
      return PartialAllreduce::create(c.comm(), count, type, m.value(), options);
    }();
    check(pa.status());
    pa_ = std::move(pa).value();
  }

  void post(pyb::handle gradient) {
    auto g = BufferRef::get(gradient, "gradient", false);
    check_layout(*g, "post");
    pyb::gil_scoped_release nogil;
    const Status s = pa_->post(g->data(), g->count(), g->type());
    pyb::gil_scoped_acquire gil;
    check(s);
  }

  std::optional<PyRound> poll(pyb::handle out) {
    std::unique_ptr<BufferRef> o = out_buffer(out);
    Result<std::optional<RoundResult>> r = [&] {
      pyb::gil_scoped_release nogil;
      return pa_->poll();
    }();
    check(r.status());
    if (!r.value()) return std::nullopt;
    return hand_back(*r.value(), std::move(o));
  }

  PyRound wait(pyb::handle out, std::optional<double> timeout) {
    std::unique_ptr<BufferRef> o = out_buffer(out);
    const std::chrono::nanoseconds t = timeout_of(timeout);
    Interrupt interrupt;
    Result<RoundResult> r = [&] {
      pyb::gil_scoped_release nogil;
      // Ctrl-C ends the wait as a timeout does: no result is taken, the object lives on.
      return pa_->wait(t, [&] { return interrupt.check() ? interrupt.status() : Status::Ok(); });
    }();
    if (interrupt.raised()) interrupt.rethrow();
    check(r.status());
    return hand_back(r.value(), std::move(o));
  }

  // Rounds go to `callback(Round)` (data: a new numpy array), on this thread with the GIL. An
  // exception from the callback stops the deliveries (flush still completes: the other ranks
  // depend on it) and is raised afterwards.
  uint64_t flush(pyb::object callback) {
    std::optional<pyb::error_already_set> failed;
    Result<uint64_t> round = [&] {
      pyb::gil_scoped_release nogil;
      return pa_->flush([&](RoundResult&& r) {
        if (callback.is_none()) return;
        pyb::gil_scoped_acquire gil;
        if (failed) return;
        try {
          callback(round_of(r, new_array(r)));
        } catch (pyb::error_already_set& e) {
          failed = std::move(e);
        }
      });
    }();
    if (failed) throw std::move(*failed);
    check(round.status());
    return round.value();
  }

  void destroy() {
    pyb::gil_scoped_release nogil;
    pa_->destroy();
  }

  size_t count() const { return pa_->count(); }
  std::string dtype() const { return long_dtype_name(pa_->type()); }
  std::string mode() const { return pa_->mode().name(); }
  pyb::dict stats() const {
    // posts: every post() that was accepted; late_posts: those that missed their round;
    // dropped_posts: the late ones late="drop" discarded. (PartialStats counts posts that added
    // data, so dropped ones are added back here.)
    const PartialStats s = pa_->stats();
    return pyb::dict("posts"_a = s.posts + s.dropped_posts,
                     "late_posts"_a = s.late_posts + s.dropped_posts,
                     "dropped_posts"_a = s.dropped_posts, "rounds_activated"_a = s.rounds_activated,
                     "rounds_delivered"_a = s.rounds_delivered);
  }
  // Straggler attribution: one dict per rank (RankLateness).
  pyb::list lateness() const {
    pyb::list out;
    for (const RankLateness& l : pa_->lateness()) {
      out.append(pyb::dict(
          "rounds"_a = l.rounds, "posts"_a = l.posts, "fresh"_a = l.fresh, "late"_a = l.late,
          "absent"_a = l.absent, "late_rounds"_a = l.late_rounds, "max_age"_a = l.max_age,
          "late_seconds"_a = l.late_seconds, "late_fraction"_a = l.late_fraction()));
    }
    return out;
  }

 private:
  void check_layout(const BufferRef& b, const char* call) const {
    if (b.type() != pa_->type()) {
      raise_type_error(std::string(call) + ": " + b.what() + " holds " + long_dtype_name(b.type()) +
                       " but the partial allreduce holds " + long_dtype_name(pa_->type()));
    }
    if (b.count() != pa_->count()) {
      raise_value_error(std::string(call) + ": " + b.what() + " holds " + describe(b) +
                        " but the partial allreduce holds " + std::to_string(pa_->count()) + " x " +
                        long_dtype_name(pa_->type()));
    }
  }

  // Checked before a round is taken, so that a bad `out` never costs a result.
  std::unique_ptr<BufferRef> out_buffer(pyb::handle out) {
    if (out.is_none()) return nullptr;
    auto o = BufferRef::get(out, "out", true);
    check_layout(*o, "out");
    return o;
  }

  PyRound hand_back(const RoundResult& r, std::unique_ptr<BufferRef> out) {
    if (!out) return round_of(r, new_array(r));
    if (r.count() > 0) std::memcpy(out->data(), r.data(), r.count() * dtype_size(r.type()));
    return round_of(r, out->object());
  }

  pyb::object comm_ref_;  // the communicator outlives its partial allreduces
  std::unique_ptr<PartialAllreduce> pa_;

 public:
  PartialAllreduce& pa() { return *pa_; }
};

}  // namespace
}  // namespace eagercomm::py

PYBIND11_MODULE(_core, m) {
  namespace pyb = pybind11;
  using namespace eagercomm::py;
  using pyb::arg;
  m.doc() = "eagercomm's runtime: communicators, collectives and partial allreduce.";
  m.attr("__version__") = EAGERCOMM_VERSION_STRING;
  m.attr("ABI_VERSION") = EAGERCOMM_ABI_VERSION;
  // The `timeout` that means no limit (kWaitForever, EC_WAIT_FOREVER).
  m.attr("WAIT_FOREVER") = std::numeric_limits<double>::infinity();
  register_errors(m);

  pyb::class_<PyComm>(m, "Communicator",
                      "One rank's handle on a group of ranks (eagercomm::Communicator).")
      .def_static("from_env", &PyComm::from_env,
                  "Joins the job this process was started in (eagercomm-run, torchrun, mpirun, "
                  "srun).")
      .def_property_readonly("rank", &PyComm::rank)
      .def_property_readonly("size", &PyComm::size)
      .def_property_readonly("generation", &PyComm::generation,
                             "How many times shrink() has rebuilt this communicator.")
      .def("shrink", &PyComm::shrink, arg("timeout") = pyb::none(),
           "Collective over the survivors after a PeerFailedError: agree on who is left and "
           "rebuild this communicator over them, in place (rank and size change). Returns the "
           "members' former ranks, in their new order.")
      .def_property_readonly("transport", &PyComm::transport)
      .def("allreduce", &PyComm::allreduce, arg("send"), arg("recv") = pyb::none(),
           arg("op") = "sum", arg("timeout") = pyb::none(),
           "recv = op over ranks of send (in place when recv is None); returns recv. timeout: "
           "seconds (None or 0: EAGERCOMM_TIMEOUT; WAIT_FOREVER: no limit).")
      .def("broadcast", &PyComm::broadcast, arg("buf"), arg("root"), arg("timeout") = pyb::none(),
           "buf on every rank = buf on root; returns buf. timeout as for allreduce.")
      .def("allgather", &PyComm::allgather, arg("send"), arg("recv"), arg("timeout") = pyb::none(),
           "recv (size x len(send) elements) = every rank's send in rank order; returns recv. "
           "timeout as for allreduce.")
      .def("barrier", &PyComm::barrier, arg("timeout") = pyb::none(),
           "Returns once every rank has called it. timeout as for allreduce.")
      .def("abort", &PyComm::abort, arg("reason") = "",
           "destroy() from any thread: calls blocked in this communicator and later ones raise "
           "AbortedError carrying `reason`; the peers' operations in flight fail with "
           "PeerFailedError.")
      .def("destroy", &PyComm::destroy, "Leaves the job; later calls raise AbortedError.")
      .def("__enter__", [](pyb::object self) { return self; })
      .def("__exit__", [](PyComm& self, pyb::args) { self.destroy(); });

  pyb::class_<PyRound>(m, "Round", "One completed round of a partial allreduce.")
      .def_readonly("round", &PyRound::round)
      .def_readonly("fresh_count", &PyRound::fresh_count)
      .def_readonly("contributors", &PyRound::contributors)
      .def_readonly("max_age", &PyRound::max_age)
      .def_readonly("data", &PyRound::data)
      .def("__repr__", [](const PyRound& r) {
        return "<eagercomm.Round " + std::to_string(r.round) + ": " +
               std::to_string(r.fresh_count) + " fresh, " + std::to_string(r.contributors) +
               " contributors, max age " + std::to_string(r.max_age) + ">";
      });

  pyb::class_<PyPartial>(m, "PartialAllreduce",
                         "Partial allreduce (eager-SGD): collective creation, then post / poll "
                         "/ wait at each rank's own pace, flush at the end.")
      .def(pyb::init<pyb::object, pyb::handle, pyb::handle, const std::string&, const std::string&,
                     pyb::handle, pyb::handle, pyb::handle, const std::string&>(),
           arg("comm"), arg("count"), arg("dtype"), arg("mode") = "solo", arg("late") = "carry",
           arg("sync_every") = 0, arg("seed") = 0, arg("result_depth") = 4,
           arg("on_failure") = "fail")
      .def("post", &PyPartial::post, arg("gradient"))
      .def("poll", &PyPartial::poll, arg("out") = pyb::none(), "The next completed Round, or None.")
      .def("wait", &PyPartial::wait, arg("out") = pyb::none(), arg("timeout") = pyb::none(),
           "The next Round, waiting for it up to timeout seconds (None or 0: EAGERCOMM_TIMEOUT; "
           "WAIT_FOREVER: no limit). Ctrl-C raises KeyboardInterrupt; the object lives on, as "
           "after a timeout.")
      .def("flush", &PyPartial::flush, arg("callback") = pyb::none(),
           "Collective: drains every carried contribution; returns the flush round's number.")
      .def("destroy", &PyPartial::destroy)
      .def_property_readonly("count", &PyPartial::count)
      .def_property_readonly("dtype", &PyPartial::dtype)
      .def_property_readonly("mode", &PyPartial::mode)
      .def_property_readonly(
          "rank", [](PyPartial& self) { return self.pa().rank(); },
          "This rank's number in the group the rounds run over now (after a failure survived, "
          "on_failure='continue': the survivors')")
      .def_property_readonly(
          "size", [](PyPartial& self) { return self.pa().size(); },
          "The number of ranks the rounds run over now")
      .def_property_readonly("stats", &PyPartial::stats)
      .def("lateness", &PyPartial::lateness,
           "Straggler attribution: per rank, rounds it was fresh, late (carried) or absent in, "
           "how many rounds late its carried posts landed, and an estimate in seconds")
      .def("__enter__", [](pyb::object self) { return self; })
      .def("__exit__", [](PyPartial& self, pyb::args) { self.destroy(); });
}
