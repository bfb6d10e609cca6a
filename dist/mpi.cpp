#include "dist/mpi.h"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "dist/reduce_dtype.h"
#include "dist/roll_call.h"

namespace stoke::dist {

using internal::visit_floating;

namespace {

// stoke's own tags are negative (the ring's is -1), MPI's are >= 0: every tag is shifted by this.
constexpr int64_t kTagBias = 16;

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// Held around stoke's MPI calls below MPI_THREAD_MULTIPLE. One communicator's calls are serial
// already (the base runs them on one thread at a time), but two communicators' are not.
std::mutex& mpi_call_mutex() {
  static std::mutex m;
  return m;
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Initializes MPI unless the program did; returns the thread level MPI provides.
int init_mpi() {
  static std::mutex init_mutex;
  std::lock_guard<std::mutex> lock(init_mutex);
  int initialized = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  STOKE_CHECK(!finalized, "MpiCommunicator", "MPI was already finalized");
  if (!initialized) {
    // At least SERIALIZED, not FUNNELED: non-blocking calls run MPI on the communicator's worker
    // thread. MULTIPLE where MPI has it (OpenMPI does): then the watchdog can ask the other ranks
    // where they are while a call is stuck (MpiCommunicator::roll_call).
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    STOKE_CHECK(rc == MPI_SUCCESS, "MpiCommunicator", "MPI_Init_thread failed (error ", rc, ")");
    std::atexit(finalize_at_exit);  // stoke initialized MPI, so stoke finalizes it
    STOKE_CHECK(provided >= MPI_THREAD_SERIALIZED, "MpiCommunicator", "MPI provides only ",
                thread_level_name(provided),
                "; stoke needs MPI_THREAD_SERIALIZED (non-blocking calls run MPI on a worker "
                "thread)");
  } else {
    MPI_Query_thread(&provided);
    STOKE_CHECK(provided >= MPI_THREAD_SERIALIZED, "MpiCommunicator", "MPI was initialized with ",
                thread_level_name(provided),
                "; stoke needs MPI_THREAD_SERIALIZED (non-blocking calls run MPI on a worker "
                "thread): initialize it with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...)");
  }
  return provided;
}

// Data movement: an unsigned type of the element's size, so that counts are in elements.
MPI_Datatype storage_type(DType t) {
  switch (dtype_size(t)) {
    case 1:
      return MPI_UINT8_T;
    case 2:
      return MPI_UINT16_T;
    case 4:
      return MPI_UINT32_T;
    default:
      return MPI_UINT64_T;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::max ? MPI_MAX : MPI_SUM;  // avg: a sum, divided afterwards
}

// The type a reduction of T runs in: T for f32 and f64; f32 for f16 and bf16, which MPI lacks.
// They are converted to f32, reduced and rounded back once, rather than reduced by a custom MPI_Op
// on 16-bit storage: MPI's own SUM and MAX then run (any algorithm, no user callback), and the
// result is the in-process engine's (exact sum, one rounding) up to f32 accumulation, not N - 1
// roundings in the storage type. The price is an f32 copy and twice the bytes on the wire; stoke's
// ring (dist/ring.h) is the path that moves half types at their own size.
template <class T>
using ReduceT = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
MPI_Datatype reduce_type() {
  return std::is_same_v<ReduceT<T>, double> ? MPI_DOUBLE : MPI_FLOAT;
}

// p[0, n) in the reduction type: p itself, or its f32 copy in scratch (if `copy`, else uninit).
template <class T>
ReduceT<T>* reduce_view(T* p, int64_t n, std::vector<float>& scratch, bool copy = true) {
  if constexpr (std::is_same_v<T, ReduceT<T>>) {
    return p;
  } else {
    scratch.resize(static_cast<size_t>(n));
    if (copy)
      for (int64_t i = 0; i < n; ++i) scratch[i] = static_cast<float>(p[i]);
    return scratch.data();
  }
}

// Writes a sum or max back to `out`, divided by the group size for avg and rounded to T.
template <class T, class R>
void finish(const R* reduced, T* out, int64_t n, ReduceOp op, int size) {
  if constexpr (std::is_same_v<T, R>) {
    if (op != ReduceOp::avg && reduced == out) return;  // reduced in place, nothing to round
  }
  for (int64_t i = 0; i < n; ++i) {
    R v = reduced[i];
    if (op == ReduceOp::avg) v /= static_cast<R>(size);
    out[i] = T(v);
  }
}

// Calls f(offset, length) for pieces of at most `max` elements (none when n is 0).
template <class F>
void for_pieces(int64_t n, int64_t max, F&& f) {
  for (int64_t off = 0; off < n; off += max) f(off, std::min(max, n - off));
}

int64_t pieces(int64_t n, int64_t max) {
  return (n + max - 1) / max;
}

}  // namespace

// --- the watchdog --------------------------------------------------------------------------------

// A thread that aborts the job when a call has run longer than the timeout. Arming is cheap (a
// mutex and, only when the thread is idle, a notify); a finished call is not announced: the thread
// wakes at that call's deadline, sees it ended, and sleeps until the next one's.
//
// On a timeout it names the ranks that did not arrive: with MPI_THREAD_MULTIPLE it sends every
// other rank the number of the collective it is stuck in, over a communicator of its own, and
// listens for the same from them for a grace period (the live ranks' watchdogs fire within it,
// all stuck in the same collective). A rank not heard from is stopped, dead, or computing
// outside stoke's collectives; a rank heard from in another collective issued a different order.
class MpiCommunicator::Watchdog {
 public:
  // owner: asked for the roll call (MpiCommunicator::roll_call).
  Watchdog(MpiCommunicator& owner, MPI_Comm comm, int rank, std::chrono::milliseconds timeout)
      : owner_(owner), comm_(comm), rank_(rank), timeout_(timeout), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // seq: the collective the call belongs to, or -1 for a point-to-point call outside one.
  void arm(const std::string& label, int64_t seq) {
    std::lock_guard<std::mutex> lock(mutex_);
    label_ = label;
    seq_ = seq;
    since_ = std::chrono::steady_clock::now();
    armed_ = true;
    ++generation_;
    if (idle_) cv_.notify_one();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (!armed_) {
        idle_ = true;
        cv_.wait(lock);
        idle_ = false;
        continue;
      }
      const uint64_t generation = generation_;
      if (cv_.wait_until(lock, since_ + timeout_,
                         [&] { return stop_ || !armed_ || generation_ != generation; }))
        continue;
      // The call is stuck: a peer died, stalls, or never issued the call. MPI_Abort from this
      // thread while another is inside MPI is beyond MPI_THREAD_SERIALIZED's promise, but it is
      // the call meant to end a stuck job; OpenMPI ends it through its runtime, as it does when a
      // rank dies.
      const std::string label = label_;
      const int64_t seq = seq_;
      lock.unlock();  // the roll call takes a while; the stuck call may end meanwhile
      const std::string where = owner_.roll_call(seq, roll_call_grace(timeout_), 0);
      const std::string message =
          detail::str_cat("stoke::dist: ", label, " on rank ", rank_, " has waited ",
                          std::chrono::duration<double>(timeout_).count(), " s (timeout)", where,
                          "; aborting the job\n");
      std::fputs(message.c_str(), stderr);
      std::fflush(stderr);
      MPI_Abort(comm_, 1);
      std::_Exit(1);  // MPI_Abort does not return
    }
  }

  MpiCommunicator& owner_;
  const MPI_Comm comm_;
  const int rank_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool armed_ = false, idle_ = false, stop_ = false;
  uint64_t generation_ = 0;
  std::string label_;
  int64_t seq_ = -1;
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;  // last: starts once the members above exist
};

// --- the roll call -------------------------------------------------------------------------------

// Sends this rank's seq to every other rank on roll_ (tag = channel), then collects theirs until
// all answered or the grace period ends. Runs on a watchdog's thread while another thread may be
// inside MPI: needs MPI_THREAD_MULTIPLE (roll_ exists only then).
std::string MpiCommunicator::roll_call(int64_t seq, std::chrono::milliseconds grace, int channel) {
  if (roll_ == MPI_COMM_NULL || size_ < 2) return "";
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request request;  // freed at once: the send completes on its own (eager, 8 bytes)
    if (MPI_Isend(&seq, 1, MPI_INT64_T, r, channel, roll_, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  std::vector<int64_t> heard(static_cast<size_t>(size_), kRollCallNotHeard);
  heard[static_cast<size_t>(rank_)] = seq;
  int missing = size_ - 1;
  while (missing > 0 && std::chrono::steady_clock::now() < deadline) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, channel, roll_, &flag, &status) != MPI_SUCCESS) return "";
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int64_t theirs = 0;
    if (MPI_Recv(&theirs, 1, MPI_INT64_T, status.MPI_SOURCE, channel, roll_, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS)
      return "";
    int64_t& slot = heard[static_cast<size_t>(status.MPI_SOURCE)];
    if (slot == kRollCallNotHeard) --missing;
    slot = theirs;
  }
  return describe_roll_call(heard, seq, grace);
}

// Around each do_* method: checks the tensors are on the cpu, takes the process's MPI lock where
// MPI needs it and arms the watchdog.
class MpiCommunicator::Call {
 public:
  Call(MpiCommunicator& c, std::initializer_list<const Tensor*> tensors) : c_(c) {
    for (const Tensor* t : tensors)
      STOKE_CHECK(t->device().is_cpu(), c.op_label().c_str(),
                  "the MPI communicator takes cpu tensors, got one on ", t->device().str());
    if (c.serialize_) lock_ = std::unique_lock<std::mutex>(mpi_call_mutex());
    if (c.watchdog_)
      c.watchdog_->arm(c.op_label(), c.op_label().find('#') != std::string::npos ? c.seq_ : -1);
  }
  ~Call() {
    if (c_.watchdog_) c_.watchdog_->disarm();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  MpiCommunicator& c_;
  std::unique_lock<std::mutex> lock_;
};

// What a point-to-point message announces before its payload: MPI sees bytes, not stoke's dtype.
struct MpiCommunicator::Header {
  int64_t numel = 0;
  int64_t dtype = 0;
  bool operator==(const Header&) const = default;
};

enum class MpiCommunicator::Kind : int64_t {
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  barrier
};

namespace {
const char* kind_name(int64_t kind) {
  static const char* const names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                      "barrier"};
  return kind >= 0 && kind < 5 ? names[kind] : "?";
}
}  // namespace

// --- construction --------------------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm comm, MpiOptions options) : options_(options) {
  STOKE_CHECK(options.timeout.count() >= 0, "MpiCommunicator", "the timeout must be >= 0, got ",
              options.timeout.count(), " ms");
  STOKE_CHECK(options.max_count >= 1 && options.max_count <= INT_MAX, "MpiCommunicator",
              "max_count must be in [1, INT_MAX], got ", options.max_count);
  thread_level_ = init_mpi();
  serialize_ = thread_level_ < MPI_THREAD_MULTIPLE;
  std::unique_lock<std::mutex> lock;
  if (serialize_) lock = std::unique_lock<std::mutex>(mpi_call_mutex());
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  // Errors come back as codes, which check() turns into a stoke::Error naming the call.
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  check(MPI_Comm_rank(node, &local_rank_), "MPI_Comm_rank");
  check(MPI_Comm_free(&node), "MPI_Comm_free");
  void* ub = nullptr;
  int flag = 0;  // MPI_TAG_UB is attached to MPI_COMM_WORLD
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag) == MPI_SUCCESS && flag)
    tag_ub_ = *static_cast<int*>(ub);
  // The roll call's own communicator, also for the watchdogs of communicators bootstrapped from
  // this one (NcclCommunicator), whatever this one's timeout.
  if (thread_level_ == MPI_THREAD_MULTIPLE) check(MPI_Comm_dup(comm_, &roll_), "MPI_Comm_dup");
  if (options.timeout.count() > 0)
    watchdog_ = std::make_unique<Watchdog>(*this, comm_, rank_, options.timeout);
}

MpiCommunicator::~MpiCommunicator() {
  stop_worker();      // the worker may be inside MPI (the watchdog still guards it)
  watchdog_.reset();  // joins its thread
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) {
    std::unique_lock<std::mutex> lock;
    if (serialize_) lock = std::unique_lock<std::mutex>(mpi_call_mutex());
    MPI_Comm_free(&comm_);
    if (roll_ != MPI_COMM_NULL) MPI_Comm_free(&roll_);
  }
}

void MpiCommunicator::check(int rc, const char* call) const {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  STOKE_FAIL(op_label().empty() ? "MpiCommunicator" : op_label().c_str(), call, " failed on rank ",
             rank_, ": ", len ? std::string(text, len) : detail::str_cat("error ", rc));
}

int MpiCommunicator::mpi_tag(int tag) const {
  const int64_t t = int64_t{tag} + kTagBias;
  STOKE_CHECK(t >= 0 && t <= tag_ub_, op_label().c_str(), "tag ", tag, " is outside [", -kTagBias,
              ", ", tag_ub_ - kTagBias, "], the tags MPI allows here");
  return static_cast<int>(t);
}

// --- point to point ------------------------------------------------------------------------------
//
// A message is a header (element count, dtype), then the payload in pieces of at most max_count
// elements, all on the same tag (MPI keeps their order). The header is a separate message so that
// the payload stays contiguous (MPI's fast paths) and so that a mismatch is found before the
// receiving tensor is written; the payload is still drained, leaving the channel in step.

Tensor MpiCommunicator::drain_buffer(const Header& got, int src) const {
  STOKE_CHECK(got.numel >= 0 && got.dtype >= 0 && got.dtype <= static_cast<int64_t>(DType::boolean),
              op_label().c_str(), "rank ", rank_, " got a malformed header from rank ", src);
  return empty({got.numel}, {.dtype = static_cast<DType>(got.dtype)});
}

void MpiCommunicator::recv_payload(void* data, const Header& h, int src, int tag) {
  const DType dtype = static_cast<DType>(h.dtype);
  auto* p = static_cast<std::byte*>(data);
  for_pieces(h.numel, options_.max_count, [&](int64_t off, int64_t len) {
    check(MPI_Recv(p + off * dtype_size(dtype), static_cast<int>(len), storage_type(dtype), src,
                   tag, comm_, MPI_STATUS_IGNORE),
          "MPI_Recv");
  });
}

void MpiCommunicator::fail_recv(const Header& want, const Header& got, int src) const {
  if (got.numel != want.numel)
    STOKE_FAIL(op_label().c_str(), "rank ", rank_, " expected ", want.numel, " elements, rank ",
               src, " sent ", got.numel);
  STOKE_FAIL(op_label().c_str(), "rank ", rank_, " expected ", static_cast<DType>(want.dtype),
             ", rank ", src, " sent ", static_cast<DType>(got.dtype));
}

void MpiCommunicator::do_send(const Tensor& t, int dst, int tag) {
  Call call(*this, {&t});
  const int mtag = mpi_tag(tag);
  const Header h{t.numel(), static_cast<int64_t>(t.dtype())};
  check(MPI_Send(&h, 2, MPI_INT64_T, dst, mtag, comm_), "MPI_Send");
  const auto* p = static_cast<const std::byte*>(t.data_ptr());
  for_pieces(t.numel(), options_.max_count, [&](int64_t off, int64_t len) {
    check(MPI_Send(p + off * t.element_size(), static_cast<int>(len), storage_type(t.dtype()), dst,
                   mtag, comm_),
          "MPI_Send");
  });
}

void MpiCommunicator::do_recv(Tensor& t, int src, int tag) {
  Call call(*this, {&t});
  const int mtag = mpi_tag(tag);
  const Header want{t.numel(), static_cast<int64_t>(t.dtype())};
  Header got;
  check(MPI_Recv(&got, 2, MPI_INT64_T, src, mtag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
  if (got == want) return recv_payload(t.data_ptr(), want, src, mtag);
  Tensor drain = drain_buffer(got, src);
  recv_payload(drain.data_ptr(), got, src, mtag);
  fail_recv(want, got, src);
}

// MPI_Sendrecv for the headers, then for the payload pieces. Where one side has more pieces, the
// extra sends are non-blocking (waited for at the end) and the extra receives blocking: no pattern
// of peers, a rank sending to itself included, can then deadlock.
void MpiCommunicator::do_sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  Call call(*this, {&out, &in});
  const int mtag = mpi_tag(tag);
  const Header mine{out.numel(), static_cast<int64_t>(out.dtype())};
  const Header want{in.numel(), static_cast<int64_t>(in.dtype())};
  Header got;
  check(MPI_Sendrecv(&mine, 2, MPI_INT64_T, dst, mtag, &got, 2, MPI_INT64_T, src, mtag, comm_,
                     MPI_STATUS_IGNORE),
        "MPI_Sendrecv");
  const bool ok = got == want;
  Tensor drain;
  if (!ok) drain = drain_buffer(got, src);  // our payload still goes out: dst may expect it
  const auto* send_p = static_cast<const std::byte*>(out.data_ptr());
  auto* recv_p = static_cast<std::byte*>(ok ? in.data_ptr() : drain.data_ptr());
  const MPI_Datatype send_type = storage_type(out.dtype());
  const DType in_dtype = static_cast<DType>(got.dtype);
  const MPI_Datatype recv_type = storage_type(in_dtype);
  const int64_t max = options_.max_count;
  const int64_t k_out = pieces(out.numel(), max), k_in = pieces(got.numel, max);
  std::vector<MPI_Request> sends;
  for (int64_t k = 0; k < std::max(k_out, k_in); ++k) {
    const int send_len = static_cast<int>(std::min(max, out.numel() - k * max));
    const int recv_len = static_cast<int>(std::min(max, got.numel - k * max));
    const std::byte* s = send_p + k * max * out.element_size();
    std::byte* r = recv_p + k * max * dtype_size(in_dtype);
    if (k < k_out && k < k_in) {
      check(MPI_Sendrecv(s, send_len, send_type, dst, mtag, r, recv_len, recv_type, src, mtag,
                         comm_, MPI_STATUS_IGNORE),
            "MPI_Sendrecv");
    } else if (k < k_out) {
      check(MPI_Isend(s, send_len, send_type, dst, mtag, comm_, &sends.emplace_back()),
            "MPI_Isend");
    } else {
      check(MPI_Recv(r, recv_len, recv_type, src, mtag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    }
  }
  if (!sends.empty())
    check(MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
  if (!ok) fail_recv(want, got, src);
}

// --- non-blocking point to point -----------------------------------------------------------------
//
// The same messages as send/recv (a header, then the payload pieces), posted with MPI_Isend and
// MPI_Irecv. A receive posts its payload pieces for the count it expects; at the wait, a header
// that differs cancels them (or, when one already matched, lets it fail) and drains the payload
// the header announced, as do_recv does, before throwing.

struct MpiCommunicator::Pending {
  int64_t id = -1;
  bool recv = false;
  Tensor t;
  int peer = 0, mtag = 0;
  Header header;                      // a send's own; the header a receive got
  std::vector<MPI_Request> requests;  // [0]: the header, then the payload pieces
};

int64_t MpiCommunicator::do_isend(const Tensor& t, int dst, int tag) {
  Call call(*this, {&t});
  std::unique_ptr<Pending> p;
  if (!spare_.empty()) {
    p = std::move(spare_.back());
    spare_.pop_back();
  } else {
    p = std::make_unique<Pending>();
  }
  p->id = next_request_id_++;
  p->recv = false;
  p->t = t;
  p->peer = dst;
  p->mtag = mpi_tag(tag);
  p->header = {t.numel(), static_cast<int64_t>(t.dtype())};
  p->requests.clear();
  check(MPI_Isend(&p->header, 2, MPI_INT64_T, dst, p->mtag, comm_, &p->requests.emplace_back()),
        "MPI_Isend");
  const auto* data = static_cast<const std::byte*>(t.data_ptr());
  for_pieces(t.numel(), options_.max_count, [&](int64_t off, int64_t len) {
    check(MPI_Isend(data + off * t.element_size(), static_cast<int>(len), storage_type(t.dtype()),
                    dst, p->mtag, comm_, &p->requests.emplace_back()),
          "MPI_Isend");
  });
  pending_.push_back(std::move(p));
  return pending_.back()->id;
}

int64_t MpiCommunicator::do_irecv(const Tensor& t, int src, int tag) {
  Call call(*this, {&t});
  std::unique_ptr<Pending> p;
  if (!spare_.empty()) {
    p = std::move(spare_.back());
    spare_.pop_back();
  } else {
    p = std::make_unique<Pending>();
  }
  p->id = next_request_id_++;
  p->recv = true;
  p->t = t;
  p->peer = src;
  p->mtag = mpi_tag(tag);
  p->requests.clear();
  check(MPI_Irecv(&p->header, 2, MPI_INT64_T, src, p->mtag, comm_, &p->requests.emplace_back()),
        "MPI_Irecv");
  auto* data = static_cast<std::byte*>(t.data_ptr());
  for_pieces(t.numel(), options_.max_count, [&](int64_t off, int64_t len) {
    check(MPI_Irecv(data + off * t.element_size(), static_cast<int>(len), storage_type(t.dtype()),
                    src, p->mtag, comm_, &p->requests.emplace_back()),
          "MPI_Irecv");
  });
  pending_.push_back(std::move(p));
  return pending_.back()->id;
}

void MpiCommunicator::do_wait(int64_t id) {
  size_t i = 0;
  while (i < pending_.size() && pending_[i]->id != id) ++i;
  STOKE_CHECK(i < pending_.size(), op_label().c_str(), "rank ", rank_,
              ": no pending request with id ", id);
  std::unique_ptr<Pending> p = std::move(pending_[i]);
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  Call call(*this, {&p->t});
  std::vector<MPI_Request>& rq = p->requests;
  if (!p->recv) {
    check(MPI_Waitall(static_cast<int>(rq.size()), rq.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  } else {
    check(MPI_Wait(&rq[0], MPI_STATUS_IGNORE), "MPI_Wait");
    const Header want{p->t.numel(), static_cast<int64_t>(p->t.dtype())};
    if (p->header == want) {
      if (rq.size() > 1)
        check(MPI_Waitall(static_cast<int>(rq.size() - 1), rq.data() + 1, MPI_STATUSES_IGNORE),
              "MPI_Waitall");
    } else {
      // The payload was posted for the count this rank expected: take those receives back, then
      // drain what the sender announced (unless a receive already matched part of it).
      bool all_cancelled = true;
      for (size_t k = 1; k < rq.size(); ++k) {
        MPI_Cancel(&rq[k]);
        MPI_Status status;
        MPI_Wait(&rq[k], &status);
        int cancelled = 0;
        MPI_Test_cancelled(&status, &cancelled);
        all_cancelled = all_cancelled && cancelled;
      }
      if (all_cancelled) {
        Tensor drain = drain_buffer(p->header, p->peer);
        recv_payload(drain.data_ptr(), p->header, p->peer, p->mtag);
      }
      const Header got = p->header;
      const int src = p->peer;
      p->t = Tensor();
      spare_.push_back(std::move(p));
      fail_recv(want, got, src);
    }
  }
  p->t = Tensor();  // the tensor is the caller's again
  spare_.push_back(std::move(p));
}

// --- collectives ---------------------------------------------------------------------------------

void MpiCommunicator::agree(Kind kind, int64_t numel, DType dtype, int64_t op) {
  if (!options_.check_args) return;
  // One MPI_Allreduce(MIN) of each field and its negation gives every field's min and max.
  constexpr int kFields = 5;
  const int64_t mine[kFields] = {static_cast<int64_t>(kind), seq_, numel,
                                 static_cast<int64_t>(dtype), op};
  int64_t v[2 * kFields];
  for (int i = 0; i < kFields; ++i) {
    v[i] = mine[i];
    v[kFields + i] = -mine[i];
  }
  check(MPI_Allreduce(MPI_IN_PLACE, v, 2 * kFields, MPI_INT64_T, MPI_MIN, comm_), "MPI_Allreduce");
  bool same = true;
  for (int i = 0; i < kFields; ++i) same = same && v[i] == -v[kFields + i];
  if (same) return;
  // Every rank saw the disagreement: all gather the fields, so all throw the same message, naming
  // the first rank that differs from rank 0 (as the in-process engine does).
  std::vector<int64_t> all(static_cast<size_t>(kFields) * size_);
  check(MPI_Allgather(mine, kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, comm_),
        "MPI_Allgather");
  const int64_t* r0 = all.data();
  for (int r = 1; r < size_; ++r) {
    const int64_t* x = all.data() + static_cast<size_t>(r) * kFields;
    const char* label = op_label().c_str();
    if (x[0] != r0[0] || x[1] != r0[1])
      STOKE_FAIL(label, "rank ", r, " called ", kind_name(x[0]), " #", x[1],
                 " while rank 0 called ", kind_name(r0[0]), " #", r0[1]);
    if (x[2] != r0[2])
      STOKE_FAIL(label, "rank ", r, " has ", x[2], " elements, rank 0 has ", r0[2]);
    if (x[3] != r0[3])
      STOKE_FAIL(label, "rank ", r, " has dtype ", static_cast<DType>(x[3]), ", rank 0 has ",
                 static_cast<DType>(r0[3]));
    if (x[4] != r0[4])
      STOKE_FAIL(label, "rank ", r, " passed ", x[4], ", rank 0 passed ", r0[4],
                 " (the reduce op or root must agree)");
  }
}

void MpiCommunicator::do_allreduce(Tensor& t, ReduceOp op) {
  Call call(*this, {&t});
  agree(Kind::allreduce, t.numel(), t.dtype(), static_cast<int64_t>(op));
  visit_floating(t.dtype(), op_label(), [&](auto zero) {
    using T = decltype(zero);
    const int64_t n = t.numel();
    std::vector<float> scratch;
    auto* buf = reduce_view(t.data<T>(), n, scratch);
    for_pieces(n, options_.max_count, [&](int64_t off, int64_t len) {
      check(MPI_Allreduce(MPI_IN_PLACE, buf + off, static_cast<int>(len), reduce_type<T>(),
                          mpi_op(op), comm_),
            "MPI_Allreduce");
    });
    finish(buf, t.data<T>(), n, op, size_);
  });
}

void MpiCommunicator::do_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  Call call(*this, {&input, &output});
  agree(Kind::reduce_scatter, input.numel(), input.dtype(), static_cast<int64_t>(op));
  visit_floating(input.dtype(), op_label(), [&](auto zero) {
    using T = decltype(zero);
    const int64_t block = output.numel(), max = options_.max_count;
    if (block == 0) return;
    std::vector<float> in_scratch, out_scratch;
    const auto* in = reduce_view(input.data<T>(), input.numel(), in_scratch);
    auto* out = reduce_view(output.data<T>(), block, out_scratch, /*copy=*/false);
    if (block <= max) {
      check(MPI_Reduce_scatter_block(in, out, static_cast<int>(block), reduce_type<T>(), mpi_op(op),
                                     comm_),
            "MPI_Reduce_scatter_block");
    } else {
      // Blocks past MPI's int count: block r is reduced onto rank r, piece by piece.
      for (int r = 0; r < size_; ++r)
        for_pieces(block, max, [&](int64_t off, int64_t len) {
          check(MPI_Reduce(in + r * block + off, r == rank_ ? out + off : nullptr,
                           static_cast<int>(len), reduce_type<T>(), mpi_op(op), r, comm_),
                "MPI_Reduce");
        });
    }
    finish(out, output.data<T>(), block, op, size_);
  });
}

void MpiCommunicator::do_allgather(const Tensor& input, Tensor& output) {
  Call call(*this, {&input, &output});
  agree(Kind::allgather, input.numel(), input.dtype(), -1);
  const int64_t block = input.numel(), max = options_.max_count;
  const size_t es = input.element_size();
  const MPI_Datatype type = storage_type(input.dtype());
  auto* out = static_cast<std::byte*>(output.data_ptr());
  if (block == 0) return;
  if (block <= max) {
    check(MPI_Allgather(input.data_ptr(), static_cast<int>(block), type, out,
                        static_cast<int>(block), type, comm_),
          "MPI_Allgather");
    return;
  }
  // Blocks past MPI's int count: each rank broadcasts its block, piece by piece.
  std::memcpy(out + rank_ * block * es, input.data_ptr(), block * es);
  for (int r = 0; r < size_; ++r)
    for_pieces(block, max, [&](int64_t off, int64_t len) {
      check(MPI_Bcast(out + (r * block + off) * es, static_cast<int>(len), type, r, comm_),
            "MPI_Bcast");
    });
}

void MpiCommunicator::do_broadcast(Tensor& t, int root) {
  Call call(*this, {&t});
  agree(Kind::broadcast, t.numel(), t.dtype(), root);
  auto* p = static_cast<std::byte*>(t.data_ptr());
  for_pieces(t.numel(), options_.max_count, [&](int64_t off, int64_t len) {
    check(MPI_Bcast(p + off * t.element_size(), static_cast<int>(len), storage_type(t.dtype()),
                    root, comm_),
          "MPI_Bcast");
  });
}

void MpiCommunicator::do_barrier() {
  Call call(*this, {});
  agree(Kind::barrier, 0, DType::f32, -1);
  check(MPI_Barrier(comm_), "MPI_Barrier");
}

}  // namespace stoke::dist
