// The MPI engine: one rank per process, for cpu tensors (docs/design.md, "dist/"). Jobs start with
// `mpirun -np N` or srun; stoke writes no launcher. Built when CMake finds MPI (STOKE_HAS_MPI).
#pragma once

// stoke calls MPI's C API only; without these, OpenMPI's and MPICH's mpi.h pull in the deprecated
// C++ bindings, which need their own library.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "dist/communicator.h"

namespace stoke::dist {

struct MpiOptions {
  // A call (collective or point to point) that runs longer than this prints "stoke::dist: <op> on
  // rank R has waited T s (timeout); rank 1 did not arrive (...); aborting the job" and calls
  // MPI_Abort, so that a job whose peer died or stalls ends with a message instead of hanging.
  // Naming the ranks that did not arrive needs MPI_THREAD_MULTIPLE (a roll call from the watchdog's
  // thread, up to timeout/4 within [1 s, 10 s]); below it the message names the call only.
  // Zero: no watchdog.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Before each native collective, one small MPI_Allreduce checks that every rank called the same
  // collective (and sequence number) with the same element count, dtype and reduce op or root; a
  // mismatch throws on every rank, naming it, instead of hanging or corrupting memory. Off saves
  // that round trip. Must be the same on every rank.
  bool check_args = true;
  // The most elements one MPI call moves (MPI counts are int); longer tensors go in pieces. Smaller
  // than INT_MAX only in tests, which exercise the splitting. Must be the same on every rank.
  int64_t max_count = INT_MAX;
};

// One rank of an MPI communicator. Initializes MPI (MPI_Init_thread, MPI_THREAD_MULTIPLE) unless
// the program already did, and then finalizes it at exit; a program that initialized MPI itself
// must ask for MPI_THREAD_SERIALIZED or more (non-blocking calls run MPI on the worker thread), and
// finalizes it itself, after destroying its communicators.
//
// Construction is collective over `comm`, which is duplicated: stoke's messages never match the
// caller's own on `comm`. f16/bf16 reductions are converted to f32, reduced by MPI and rounded back
// once (MPI has no half types); other reductions run in the tensor's dtype. Integer reductions are
// refused, as by the in-process engine; allgather, broadcast and send/recv move any dtype.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD, MpiOptions options = {});
  explicit MpiCommunicator(MpiOptions options) : MpiCommunicator(MPI_COMM_WORLD, options) {}
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // This rank's index among the ranks on its machine (MPI_COMM_TYPE_SHARED), under mpirun or srun.
  int local_rank() const override { return local_rank_; }
  // stoke's duplicate of the communicator it was given.
  MPI_Comm comm() const { return comm_; }
  // The thread level MPI provides (MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE).
  int thread_level() const { return thread_level_; }
  // With MPI_THREAD_MULTIPLE, over a duplicate communicator of its own; else "".
  std::string roll_call(int64_t seq, std::chrono::milliseconds grace, int channel) override;

 protected:
  STOKE_COMMUNICATOR_ENGINE_OVERRIDES
  void on_collective_start(int64_t seq) override { seq_ = seq; }

 private:
  class Watchdog;
  class Call;
  struct Header;
  struct Pending;
  enum class Kind : int64_t;

  // Throws on every rank, naming the first rank that disagrees with rank 0, unless every rank
  // called the same collective with the same count, dtype and op (check_args on).
  void agree(Kind kind, int64_t numel, DType dtype, int64_t op);
  int mpi_tag(int tag) const;
  void check(int rc, const char* call) const;
  // Receives the payload a header announced into data (its pieces, as the sender cut them).
  void recv_payload(void* data, const Header& h, int src, int tag);
  // Where a payload that does not match the receiving tensor goes, to be thrown away.
  Tensor drain_buffer(const Header& got, int src) const;
  [[noreturn]] void fail_recv(const Header& want, const Header& got, int src) const;

  MpiOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm roll_ = MPI_COMM_NULL;  // roll_call()'s (with MPI_THREAD_MULTIPLE)
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  int thread_level_ = 0;
  bool serialize_ = true;  // below MPI_THREAD_MULTIPLE: one MPI call at a time in the process
  int64_t tag_ub_ = 32767;
  int64_t seq_ = -1;  // the collective in progress (on_collective_start)
  std::unique_ptr<Watchdog> watchdog_;
  // Posted isend/irecv, and finished ones kept for reuse (their MPI_Request vectors stay
  // allocated); each is at a fixed address, which MPI holds for the header.
  std::vector<std::unique_ptr<Pending>> pending_, spare_;
  int64_t next_request_id_ = 0;
};

}  // namespace stoke::dist
