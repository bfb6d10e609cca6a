// cuda/emu: the NCCL subset of cuda/emu/nccl.h (its comment states the semantics). Ranks are
// threads; a clique is the state they share under one mutex and condition variable, which are the
// only happens-before edges between ranks, so ThreadSanitizer checks the users' synchronization.
//
// A collective is a slot numbered by the comm's call count: each rank publishes its part (buffers,
// count, type, op, root) and the last to arrive checks that the parts agree, reduces or gathers
// every rank's input into a host staging buffer in rank order, and writes every rank's output.
// Reading all inputs before writing any output makes in-place calls safe, and one thread doing the
// arithmetic makes the results bit-identical on every rank. Arrival never blocks, waiting is a
// separate step, so a group can hold several ranks' calls (one thread driving several comms).
// A send is a post in the (sender, receiver) channel; the receiver copies from it and marks it
// done, which releases the sender.
#include "cuda/emu/nccl.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "cuda/emu/internal.h"
#include "cuda/emu/nccl_reduce.h"

namespace stoke::emu::nccl {

enum class Kind { all_reduce, reduce_scatter, all_gather, broadcast, send, recv };

// One rank's arguments to a call (root doubles as the peer of send/recv).
struct Part {
  Kind kind = Kind::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
};

struct Slot {
  std::vector<Part> parts;
  std::vector<bool> present;
  int arrived = 0;
  int collected = 0;
  bool done = false;
  ncclResult_t result = ncclSuccess;
  std::string error;
};

struct Post {
  Part part;
  bool done = false;
  ncclResult_t result = ncclSuccess;
  std::string error;
};

struct Clique {
  explicit Clique(int n) : nranks(n), departed(static_cast<std::size_t>(n), false) {}
  const int nranks;
  std::mutex m;
  std::condition_variable cv;
  int aborted_by = -1;         // the rank that called ncclCommAbort
  std::vector<bool> departed;  // destroyed or aborted
  std::map<std::uint64_t, Slot> slots;
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Post>>> channels;  // (from, to)
};

}  // namespace stoke::emu::nccl

// The handle. Never freed before the process exits (retired instead), so that a watchdog thread
// aborting it while the rank's thread is in a call, or asking for its last error, reads live
// memory.
struct ncclComm {
  std::shared_ptr<stoke::emu::nccl::Clique> clique;
  int rank = 0;
  int device = 0;
  std::atomic<bool> dead{false};  // destroyed or aborted
  std::uint64_t next_seq = 0;     // guarded by clique->m
  std::string last_error;         // guarded by clique->m
};

namespace stoke::emu::nccl {
namespace {

using ::stoke::detail::str_cat;

// ncclCommInitRank's rendezvous: ids being joined, ids that failed, and retired handles.
struct Joining {
  int nranks = 0;
  std::vector<bool> joined;
  int count = 0;
  std::shared_ptr<Clique> clique;  // set when complete
  std::string error;               // set when failed
};

struct Registry {
  std::mutex m;
  std::condition_variable cv;
  std::map<std::string, std::shared_ptr<Joining>> joining;
  std::set<std::string> failed;
  std::vector<std::unique_ptr<ncclComm>> retired;
  std::uint64_t next_id = 0;
};

Registry& registry() {
  static Registry r;
  return r;
}

thread_local std::string thread_error;  // the thread's last error (ncclGetLastError(nullptr))
thread_local std::string returned;      // the text ncclGetLastError hands out

// Records `why` as the thread's and the comm's last error; returns `r`. Without the clique lock.
ncclResult_t fail(ncclComm* comm, ncclResult_t r, const std::string& why) {
  thread_error = why;
  if (comm != nullptr) {
    std::lock_guard lock(comm->clique->m);
    comm->last_error = why;
  }
  return r;
}

const char* kind_name(Kind k) {
  static constexpr const char* kNames[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                           "ncclBroadcast", "ncclSend",          "ncclRecv"};
  return kNames[static_cast<int>(k)];
}

// Bytes per element; 0 for the types the emulator does not reduce (fp8) and unknown values.
std::size_t type_size(ncclDataType_t t) {
  // int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16
  static constexpr std::size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  const auto i = static_cast<int>(t);
  return i >= 0 && i < 10 ? kSizes[i] : 0;
}

// ---- collectives -------------------------------------------------------------------------------

// The first way rank r's part differs from rank 0's; empty when they agree.
std::string disagreement(const Slot& s, std::uint64_t seq) {
  const Part& a = s.parts[0];
  for (std::size_t r = 1; r < s.parts.size(); ++r) {
    const Part& b = s.parts[r];
    const bool reduces = a.kind == Kind::all_reduce || a.kind == Kind::reduce_scatter;
    const char* what = nullptr;
    if (b.kind != a.kind) {
      what = "the collective";
    } else if (b.count != a.count) {
      what = "the count";
    } else if (b.type != a.type) {
      what = "the datatype";
    } else if (reduces && b.op != a.op) {
      what = "the reduction op";
    } else if (a.kind == Kind::broadcast && b.root != a.root) {
      what = "the root";
    }
    if (what != nullptr)
      return str_cat("collective #", seq, ": rank ", r, " called ", kind_name(b.kind), " (count ",
                     b.count, ", datatype ", b.type, ", op ", b.op, ", root ", b.root,
                     ") but rank 0 called ", kind_name(a.kind), " (count ", a.count, ", datatype ",
                     a.type, ", op ", a.op, ", root ", a.root, "): ", what, " differs");
  }
  return {};
}

// Runs a complete slot: every input is read into `staging` before any output is written.
void execute(Slot& s) {
  const Part& p0 = s.parts[0];
  const std::size_t n = s.parts.size();
  const std::size_t es = type_size(p0.type);
  const std::size_t bytes = p0.count * es;
  const DeviceAccess access;
  std::vector<unsigned char> staging;
  std::vector<const unsigned char*> in(n);
  for (std::size_t r = 0; r < n; ++r) in[r] = static_cast<const unsigned char*>(s.parts[r].send);
  switch (p0.kind) {
    case Kind::all_reduce:
      staging.resize(bytes);
      if (bytes > 0) reduce(p0.type, in, staging.data(), p0.count, p0.op);
      for (const Part& p : s.parts)
        if (bytes > 0) std::memcpy(p.recv, staging.data(), bytes);
      break;
    case Kind::reduce_scatter:
      staging.resize(bytes * n);
      if (bytes > 0) reduce(p0.type, in, staging.data(), p0.count * n, p0.op);
      for (std::size_t r = 0; r < n && bytes > 0; ++r)
        std::memcpy(s.parts[r].recv, staging.data() + r * bytes, bytes);
      break;
    case Kind::all_gather:
      staging.resize(bytes * n);
      for (std::size_t r = 0; r < n && bytes > 0; ++r)
        std::memcpy(staging.data() + r * bytes, in[r], bytes);
      for (const Part& p : s.parts)
        if (bytes > 0) std::memcpy(p.recv, staging.data(), bytes * n);
      break;
    case Kind::broadcast:
      if (bytes > 0) staging.assign(in[p0.root], in[p0.root] + bytes);
      for (const Part& p : s.parts)
        if (bytes > 0) std::memcpy(p.recv, staging.data(), bytes);
      break;
    case Kind::send:
    case Kind::recv:
      break;
  }
}

// ---- groups ------------------------------------------------------------------------------------

struct Op {
  ncclComm* comm = nullptr;
  Part part;
  cudaStream_t stream = nullptr;
  std::uint64_t seq = 0;       // collectives: the slot
  std::shared_ptr<Post> post;  // sends: the posted message
  ncclResult_t result = ncclSuccess;
  std::string error;
};

thread_local int group_depth = 0;
thread_local std::vector<Op> group_ops;
thread_local ncclResult_t group_error = ncclSuccess;  // a call inside the group that was refused

bool failed(Op& op, ncclResult_t r, std::string why) {
  if (op.result == ncclSuccess) {
    op.result = r;
    op.error = str_cat(kind_name(op.part.kind), " on rank ", op.comm->rank, ": ", std::move(why));
  }
  return false;
}

std::string aborted_text(const Clique& c) {
  return str_cat("rank ", c.aborted_by, " aborted the communicator (ncclCommAbort)");
}

// Publishes a send or a collective part; computes the collective when this rank is the last.
void arrive(Op& op) {
  Clique& c = *op.comm->clique;
  const int rank = op.comm->rank;
  std::lock_guard lock(c.m);
  if (c.aborted_by >= 0) {
    failed(op, ncclRemoteError, aborted_text(c));
    return;
  }
  if (op.part.kind == Kind::send) {
    op.post = std::make_shared<Post>();
    op.post->part = op.part;
    c.channels[{rank, op.part.root}].push_back(op.post);
    c.cv.notify_all();
    return;
  }
  op.seq = op.comm->next_seq++;
  Slot& s = c.slots[op.seq];
  if (s.parts.empty()) {
    s.parts.resize(static_cast<std::size_t>(c.nranks));
    s.present.resize(static_cast<std::size_t>(c.nranks), false);
  }
  s.parts[static_cast<std::size_t>(rank)] = op.part;
  s.present[static_cast<std::size_t>(rank)] = true;
  if (++s.arrived < c.nranks) return;
  s.error = disagreement(s, op.seq);
  if (s.error.empty()) {
    execute(s);
  } else {
    s.result = ncclInvalidUsage;
  }
  s.done = true;
  c.cv.notify_all();
}

// Waits for the op's completion (a collective's slot, a recv's message, a send's receiver).
void complete(Op& op) {
  if (op.result != ncclSuccess) return;
  Clique& c = *op.comm->clique;
  std::unique_lock lock(c.m);
  if (op.part.kind == Kind::send) {
    const auto peer = static_cast<std::size_t>(op.part.root);
    c.cv.wait(lock, [&] { return op.post->done || c.aborted_by >= 0 || c.departed[peer]; });
    if (op.post->done) {
      if (op.post->result != ncclSuccess) failed(op, op.post->result, op.post->error);
    } else if (c.aborted_by >= 0) {
      failed(op, ncclRemoteError, aborted_text(c));
    } else {
      failed(op, ncclInvalidUsage, str_cat("rank ", peer, " destroyed its communicator first"));
    }
    return;
  }
  if (op.part.kind == Kind::recv) {
    const int peer = op.part.root;
    auto& channel = c.channels[{peer, op.comm->rank}];
    c.cv.wait(lock, [&] {
      return !channel.empty() || c.aborted_by >= 0 || c.departed[static_cast<std::size_t>(peer)];
    });
    if (c.aborted_by >= 0) {
      failed(op, ncclRemoteError, aborted_text(c));
      return;
    }
    if (channel.empty()) {
      failed(op, ncclInvalidUsage, str_cat("rank ", peer, " destroyed its communicator first"));
      return;
    }
    const std::shared_ptr<Post> post = channel.front();
    channel.pop_front();
    const Part& s = post->part;
    if (s.count != op.part.count || s.type != op.part.type) {
      post->result = ncclInvalidUsage;
      post->error = str_cat("rank ", op.comm->rank, " posted a receive of count ", op.part.count,
                            ", datatype ", op.part.type, " for this send of count ", s.count,
                            ", datatype ", s.type);
      failed(op, ncclInvalidUsage,
             str_cat("rank ", peer, " sent count ", s.count, ", datatype ", s.type,
                     " to a receive of count ", op.part.count, ", datatype ", op.part.type));
    } else if (s.count > 0) {
      const DeviceAccess access;
      std::memcpy(op.part.recv, s.send, s.count * type_size(s.type));
    }
    post->done = true;
    c.cv.notify_all();
    return;
  }
  const auto it = c.slots.find(op.seq);
  Slot& s = it->second;
  auto missing_departed = [&] {
    for (std::size_t r = 0; r < s.present.size(); ++r)
      if (!s.present[r] && c.departed[r]) return static_cast<int>(r);
    return -1;
  };
  c.cv.wait(lock, [&] { return s.done || c.aborted_by >= 0 || missing_departed() >= 0; });
  if (s.done) {
    if (s.result != ncclSuccess) failed(op, s.result, s.error);
    if (++s.collected == c.nranks) c.slots.erase(it);
  } else if (c.aborted_by >= 0) {
    failed(op, ncclRemoteError, str_cat(aborted_text(c), " before collective #", op.seq, " ended"));
  } else {
    failed(op, ncclInvalidUsage,
           str_cat("rank ", missing_departed(), " destroyed its communicator before joining ",
                   "collective #", op.seq));
  }
}

// Runs a group's calls whose streams' earlier work is done: every send posted and every
// collective part published, then the collectives and receives completed in call order, then the
// sends. Returns the first error.
ncclResult_t run_arrived(std::vector<Op>& ops) {
  for (Op& op : ops)
    if (op.part.kind != Kind::recv) arrive(op);
  // Sends last: a send completes when its receiver has run, which may be this thread (to self,
  // or one thread driving both ranks).
  for (Op& op : ops)
    if (op.part.kind != Kind::send) complete(op);
  for (Op& op : ops)
    if (op.part.kind == Kind::send) complete(op);
  for (Op& op : ops)
    if (op.result != ncclSuccess) {
      for (Op& other : ops)  // the comms of later failures keep their own message
        if (other.result != ncclSuccess && &other != &op)
          fail(other.comm, other.result, other.error);
      return fail(op.comm, op.result, op.error);
    }
  return ncclSuccess;
}

// Runs a group now, after its streams' earlier work (the emulated collectives run at the call).
ncclResult_t run_group(std::vector<Op>& ops) {
  std::set<cudaStream_t> streams;
  for (const Op& op : ops) streams.insert(op.stream);
  for (cudaStream_t s : streams) detail::wait_for(s, {});
  return run_arrived(ops);
}

// A group on capturing streams is recorded into their capture as one piece of work that runs it
// at every replay, where the other ranks' replays meet it (as a captured NCCL kernel waits for
// its peers' on a GPU). A replay's failure is reported at the communicator's next call
// (fail() keeps it, as ncclCommGetAsyncError would). Otherwise the group runs now.
ncclResult_t run_or_capture(std::vector<Op>& ops) {
  const std::uint64_t id = detail::capture_id(ops.front().stream);
  for (const Op& op : ops)
    if (detail::capture_id(op.stream) != id)
      return fail(op.comm, ncclInvalidUsage,
                  str_cat(kind_name(op.part.kind), " on rank ", op.comm->rank,
                          ": one group mixes streams of different CUDA graph captures (or "
                          "captured and uncaptured streams)"));
  if (id == 0) return run_group(ops);
  // In deferred mode the replay runs as a task under the stream scheduler's lock, where the
  // other ranks' replays could never arrive: refused rather than left to hang.
  if (detail::deferred_streams())
    return fail(ops.front().comm, ncclInvalidUsage,
                str_cat(kind_name(ops.front().part.kind), " on rank ", ops.front().comm->rank,
                        ": the emulator's deferred-streams mode cannot replay a captured "
                        "collective"));
  std::function<void()> work = [group = ops] {
    std::vector<Op> run = group;  // each replay starts from the calls as made
    (void)run_arrived(run);
  };
  detail::capture_work(ops.front().stream, work);
  return ncclSuccess;
}

// Checks that [p, p + bytes) is device memory of `device`; the reason in `why` otherwise.
bool on_device(const void* p, std::size_t bytes, int device, const char* what, std::string& why) {
  if (bytes == 0) return true;
  if (p == nullptr) {
    why = str_cat(what, " is null with a non-zero count");
    return false;
  }
  const int first = device_of(p);
  const int last = device_of(static_cast<const unsigned char*>(p) + (bytes - 1));
  if (first < 0 || last < 0) {
    why = str_cat(what, " ", p, " (", bytes,
                  " bytes) is not device memory (cudaMalloc'd) over its whole extent");
  } else if (first != device || last != device) {
    why = str_cat(what, " ", p, " is memory of device ", first != device ? first : last,
                  ", the communicator's device is ", device);
  }
  return why.empty();
}

// Checks a call's arguments, then runs it now or keeps it for ncclGroupEnd.
ncclResult_t submit(ncclComm* comm, Part part, cudaStream_t stream) {
  const char* name = kind_name(part.kind);
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, str_cat(name, ": comm is null"));
  auto refuse = [&](ncclResult_t r, const std::string& why) {
    if (group_depth > 0 && group_error == ncclSuccess) group_error = r;
    return fail(comm, r, str_cat(name, " on rank ", comm->rank, ": ", why));
  };
  if (comm->dead.load())
    return refuse(ncclInvalidUsage, "the communicator was destroyed or aborted");
  const int n = comm->clique->nranks;
  const std::size_t es = type_size(part.type);
  if (es == 0) return refuse(ncclInvalidArgument, str_cat("unsupported datatype ", part.type));
  const bool reduces = part.kind == Kind::all_reduce || part.kind == Kind::reduce_scatter;
  if (reduces && (part.op < ncclSum || part.op > ncclAvg))
    return refuse(ncclInvalidArgument, str_cat("unsupported reduction op ", part.op));
  const bool p2p = part.kind == Kind::send || part.kind == Kind::recv;
  if ((part.kind == Kind::broadcast || p2p) && (part.root < 0 || part.root >= n))
    return refuse(ncclInvalidArgument,
                  str_cat(p2p ? "peer " : "root ", part.root, " is outside [0, ", n, ")"));
  if (!detail::valid_stream(stream)) return refuse(ncclInvalidArgument, "unknown stream");
  const std::size_t nn = static_cast<std::size_t>(n);
  if (part.count > SIZE_MAX / es / nn) return refuse(ncclInvalidArgument, "count too large");
  const std::size_t bytes = part.count * es;
  std::size_t send_bytes = bytes, recv_bytes = bytes;
  if (part.kind == Kind::reduce_scatter) send_bytes = bytes * nn;
  if (part.kind == Kind::all_gather) recv_bytes = bytes * nn;
  if (part.kind == Kind::broadcast && part.root != comm->rank) send_bytes = 0;  // not read
  if (part.kind == Kind::send) recv_bytes = 0;
  if (part.kind == Kind::recv) send_bytes = 0;
  std::string why;
  if (!on_device(part.send, send_bytes, comm->device, "sendbuff", why) ||
      !on_device(part.recv, recv_bytes, comm->device, "recvbuff", why))
    return refuse(ncclInvalidArgument, why);
  Op op{comm, part, stream, 0, nullptr, ncclSuccess, {}};
  if (group_depth > 0) {
    group_ops.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> one;
  one.push_back(std::move(op));
  return run_or_capture(one);
}

// ncclCommDestroy / ncclCommAbort: the rank leaves its clique (an abort wakes every waiter of
// it), and the handle moves to the registry, where it lives until the process exits.
ncclResult_t leave(ncclComm* comm, bool abort) {
  const char* name = abort ? "ncclCommAbort" : "ncclCommDestroy";
  if (comm == nullptr) return ncclSuccess;
  if (comm->dead.exchange(true))
    return fail(comm, ncclInvalidUsage, str_cat(name, ": already destroyed or aborted"));
  {
    Clique& c = *comm->clique;
    std::lock_guard lock(c.m);
    if (abort && c.aborted_by < 0) c.aborted_by = comm->rank;
    c.departed[static_cast<std::size_t>(comm->rank)] = true;
    c.cv.notify_all();
  }
  Registry& reg = registry();
  std::lock_guard lock(reg.m);
  reg.retired.emplace_back(comm);
  return ncclSuccess;
}

int nranks_of(const ncclComm& comm) {
  return comm.clique->nranks;
}

// ncclCommCount / CuDevice / UserRank: *out = what(*comm).
template <class What>
ncclResult_t query(const ncclComm* comm, int* out, What what, const char* name) {
  if (comm == nullptr || out == nullptr)
    return fail(nullptr, ncclInvalidArgument, str_cat(name, ": null argument"));
  *out = std::invoke(what, *comm);
  return ncclSuccess;
}

}  // namespace
}  // namespace stoke::emu::nccl

using stoke::detail::str_cat;
using stoke::emu::nccl::fail;
using stoke::emu::nccl::Kind;
using stoke::emu::nccl::Part;
using stoke::emu::nccl::submit;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: null");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: null");
  auto& reg = stoke::emu::nccl::registry();
  std::uint64_t n;
  {
    std::lock_guard lock(reg.m);
    n = ++reg.next_id;
  }
  std::memset(uniqueId->internal, 0, sizeof uniqueId->internal);
  const std::string text = str_cat("stoke-emu-nccl-id-", n);
  std::memcpy(uniqueId->internal, text.data(), text.size());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  using stoke::emu::nccl::group_depth;
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: comm is null");
  *comm = nullptr;
  if (group_depth > 0)
    return fail(nullptr, ncclInvalidUsage,
                "ncclCommInitRank: not supported inside ncclGroupStart/End by cuda/emu");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument,
                str_cat("ncclCommInitRank: expected nranks >= 1 and 0 <= rank < nranks, got rank ",
                        rank, " of ", nranks));
  auto& reg = stoke::emu::nccl::registry();
  const std::string key(commId.internal, sizeof commId.internal);
  std::unique_lock lock(reg.m);
  if (reg.failed.count(key) != 0)
    return fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRank: this unique id already failed to initialize");
  auto& slot = reg.joining[key];
  if (!slot) {
    slot = std::make_shared<stoke::emu::nccl::Joining>();
    slot->nranks = nranks;
    slot->joined.assign(static_cast<std::size_t>(nranks), false);
  }
  const std::shared_ptr<stoke::emu::nccl::Joining> j = slot;
  std::string why;
  if (j->nranks != nranks)
    why =
        str_cat("rank ", rank, " joined with nranks ", nranks, ", the first rank with ", j->nranks);
  else if (j->joined[static_cast<std::size_t>(rank)])
    why = str_cat("rank ", rank, " joined twice");
  if (!why.empty()) {
    // Fail the id for everyone: the ranks waiting for it would otherwise wait forever.
    j->error = str_cat("ncclCommInitRank: ", why);
    reg.joining.erase(key);
    reg.failed.insert(key);
    reg.cv.notify_all();
    lock.unlock();
    return fail(nullptr, ncclInvalidArgument, j->error);
  }
  j->joined[static_cast<std::size_t>(rank)] = true;
  if (++j->count == nranks) {
    j->clique = std::make_shared<stoke::emu::nccl::Clique>(nranks);
    reg.joining.erase(key);
    reg.cv.notify_all();
  }
  reg.cv.wait(lock, [&] { return j->clique != nullptr || !j->error.empty(); });
  if (!j->error.empty()) {
    const std::string error = j->error;
    lock.unlock();
    return fail(nullptr, ncclInvalidArgument, error);
  }
  auto* c = new ncclComm;
  c->clique = j->clique;
  c->rank = rank;
  c->device = stoke::emu::detail::current_device();
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return stoke::emu::nccl::leave(comm, false);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return stoke::emu::nccl::leave(comm, true);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr)
    return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: null argument");
  auto& c = *comm->clique;
  std::lock_guard lock(c.m);
  *asyncError = c.aborted_by >= 0 && c.aborted_by != comm->rank ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return stoke::emu::nccl::query(comm, count, &stoke::emu::nccl::nranks_of, "ncclCommCount");
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return stoke::emu::nccl::query(comm, device, &ncclComm::device, "ncclCommCuDevice");
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return stoke::emu::nccl::query(comm, rank, &ncclComm::rank, "ncclCommUserRank");
}

// NCCL's own texts, without its pointers to NCCL_DEBUG (ncclGetLastError has the detail here).
const char* ncclGetErrorString(ncclResult_t result) {
  static constexpr const char* kTexts[] = {"no error",
                                           "unhandled cuda error",
                                           "unhandled system error",
                                           "internal error",
                                           "invalid argument",
                                           "invalid usage",
                                           "remote process exited or there was a network error",
                                           "NCCL operation in progress"};
  const auto i = static_cast<int>(result);
  return i >= 0 && i < ncclNumResults ? kTexts[i] : "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) {
  using stoke::emu::nccl::returned;
  if (comm == nullptr) {
    returned = stoke::emu::nccl::thread_error;
  } else {
    std::lock_guard lock(comm->clique->m);
    returned = comm->last_error;
  }
  return returned.c_str();
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return submit(comm, Part{Kind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root},
                stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return submit(comm, Part{Kind::all_reduce, sendbuff, recvbuff, count, datatype, op, 0}, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return submit(comm, Part{Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0},
                stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, Part{Kind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0},
                stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, Part{Kind::send, sendbuff, nullptr, count, datatype, ncclSum, peer}, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, Part{Kind::recv, nullptr, recvbuff, count, datatype, ncclSum, peer}, stream);
}

ncclResult_t ncclGroupStart() {
  ++stoke::emu::nccl::group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  namespace n = stoke::emu::nccl;
  if (n::group_depth == 0)
    return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--n::group_depth > 0) return ncclSuccess;
  std::vector<n::Op> ops = std::exchange(n::group_ops, {});
  // A call refused inside the group drops the whole group, as NCCL does (its error was recorded).
  if (const ncclResult_t refused = std::exchange(n::group_error, ncclSuccess);
      refused != ncclSuccess)
    return refused;
  if (ops.empty()) return ncclSuccess;
  return n::run_or_capture(ops);
}

}  // extern "C"
