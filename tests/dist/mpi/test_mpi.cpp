// The MPI engine's collectives, point to point and non-blocking calls, and stoke's ring over it,
// on every rank of the job (np 2, 3 and 4 in ctest): values against closed forms (mpi_util.h).
// test_mpi_zero.cpp runs ZeRO against DDP in the same job.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "mpi_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

constexpr DType kMoveDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                 DType::i32, DType::i64, DType::u8,  DType::boolean};

// Rank `rank`'s data for allgather and broadcast: any dtype, distinct per rank.
Tensor pattern(int rank, int64_t n, DType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = dtype == DType::boolean ? (rank + i) % 2 : (rank * 31 + i) % 101;
  return from_vector<double>(v, {n}, {.dtype = dtype});
}

}  // namespace

TEST_CASE("mpi: rank, size and local rank match the launcher's", "[mpi]") {
  MpiCommunicator& c = world();
  CHECK(c.thread_level() >= MPI_THREAD_SERIALIZED);
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) CHECK(c.size() == std::atoi(size));
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK")) CHECK(c.rank() == std::atoi(rank));
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
    CHECK(c.local_rank() == std::atoi(local));
  CHECK(c.local_rank() == c.rank());  // one machine
}

TEST_CASE("mpi: allreduce sum, avg and max, every float dtype, lengths 0, 1, 7, 1000", "[mpi]") {
  MpiCommunicator& c = world();
  for (DType dtype : kFloatDtypes)
    for (int64_t n : kLengths)
      for (ReduceOp op : kReduceOps) {
        INFO(dtype << " n=" << n << " " << reduce_op_name(op));
        Tensor t = ramp(c.rank(), n, dtype);
        c.allreduce(t, op);
        CHECK(check_ramp_reduced(t, op, c.size()) == "");
      }
}

TEST_CASE("mpi: reduce_scatter gives rank r block r reduced, the input untouched", "[mpi]") {
  MpiCommunicator& c = world();
  for (DType dtype : kFloatDtypes)
    for (int64_t block : kLengths)
      for (ReduceOp op : kReduceOps) {
        INFO(dtype << " block=" << block << " " << reduce_op_name(op));
        const Tensor in = ramp(c.rank(), block * c.size(), dtype);
        Tensor out = empty({block}, {.dtype = dtype});
        c.reduce_scatter(in, out, op);
        CHECK(check_ramp_reduced(out, op, c.size(), c.rank() * block) == "");
        CHECK(same_bytes(in, ramp(c.rank(), block * c.size(), dtype)));
      }
}

TEST_CASE("mpi: allgather puts rank k's block at k, any dtype", "[mpi]") {
  MpiCommunicator& c = world();
  for (DType dtype : kMoveDtypes)
    for (int64_t block : kLengths) {
      INFO(dtype << " block=" << block);
      Tensor out = empty({block * c.size()}, {.dtype = dtype});
      c.allgather(pattern(c.rank(), block, dtype), out);
      for (int k = 0; k < c.size(); ++k)
        CHECK(same_bytes(out.narrow(0, k * block, block).contiguous(), pattern(k, block, dtype)));
    }
}

TEST_CASE("mpi: broadcast from every root, any dtype", "[mpi]") {
  MpiCommunicator& c = world();
  for (DType dtype : kMoveDtypes)
    for (int64_t n : kLengths)
      for (int root = 0; root < c.size(); ++root) {
        INFO(dtype << " n=" << n << " root=" << root);
        Tensor t = c.rank() == root ? pattern(root, n, dtype) : zeros({n}, {.dtype = dtype});
        c.broadcast(t, root);
        CHECK(same_bytes(t, pattern(root, n, dtype)));
      }
}

TEST_CASE("mpi: no rank leaves the barrier before every rank arrived", "[mpi]") {
  // steady_clock is CLOCK_MONOTONIC, one clock for every process of this machine.
  MpiCommunicator& c = world();
  auto now_ns = [] {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now().time_since_epoch())
                                    .count());
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(20 * c.rank()));
  const int64_t arrived = now_ns();
  c.barrier();
  const int64_t left = now_ns();
  Tensor times = empty({2 * c.size()}, {.dtype = DType::i64});
  c.allgather(from_vector<int64_t>({arrived, left}, {2}, {.dtype = DType::i64}), times);
  const std::vector<int64_t> t = times.to_vector<int64_t>();
  int64_t last_arrival = 0;
  for (int r = 0; r < c.size(); ++r) last_arrival = std::max(last_arrival, t[2 * r]);
  for (int r = 0; r < c.size(); ++r) CHECK(t[2 * r + 1] >= last_arrival);
}

TEST_CASE("mpi: send and recv keep order per tag, sendrecv shifts around the ring", "[mpi]") {
  MpiCommunicator& c = world();
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  if (c.rank() == 0) {
    c.send(from_vector<double>({1, 2, 3}, {3}, {.dtype = DType::f64}), 1, /*tag=*/7);
    c.send(from_vector<double>({4}, {1}, {.dtype = DType::f64}), 1, /*tag=*/0);
    c.send(from_vector<double>({5, 6}, {2}, {.dtype = DType::f64}), 1, /*tag=*/7);
    c.send(empty({0}), 1, /*tag=*/3);
  } else if (c.rank() == 1) {
    Tensor a = empty({1}, {.dtype = DType::f64}), b = empty({3}, {.dtype = DType::f64}),
           d = empty({2}, {.dtype = DType::f64}), z = empty({0});
    c.recv(a, 0, 0);  // tag 0 first although it was sent second
    c.recv(b, 0, 7);
    c.recv(d, 0, 7);
    c.recv(z, 0, 3);
    CHECK(a.to_vector<double>() == std::vector<double>{4});
    CHECK(b.to_vector<double>() == std::vector<double>{1, 2, 3});
    CHECK(d.to_vector<double>() == std::vector<double>{5, 6});
  }
  // Blocking sends around the whole ring, each rank's message a different length and dtype.
  for (DType dtype : kMoveDtypes) {
    INFO(dtype);
    Tensor in = empty({5 + prev}, {.dtype = dtype});
    c.sendrecv(pattern(c.rank(), 5 + c.rank(), dtype), next, in, prev, /*tag=*/2);
    CHECK(same_bytes(in, pattern(prev, 5 + prev, dtype)));
  }
  // 1000 elements, f32: the payload above MPI's eager limit.
  Tensor big = empty({1000});
  c.sendrecv(ramp(c.rank(), 1000, DType::f32), next, big, prev);
  CHECK(same_bytes(big, ramp(prev, 1000, DType::f32)));
}

TEST_CASE("mpi: the caller's own messages on MPI_COMM_WORLD never match stoke's", "[mpi]") {
  MpiCommunicator& c = world();
  // stoke's tag 0 is MPI tag 16 on its duplicate of the world; the same tag on the world itself
  // is another channel.
  if (c.rank() == 0) {
    const int mine = 42;
    MPI_Send(&mine, 1, MPI_INT, 1, 16, MPI_COMM_WORLD);
    c.send(ramp(0, 7, DType::f32), 1, 0);
  } else if (c.rank() == 1) {
    Tensor t = empty({7});
    c.recv(t, 0, 0);
    CHECK(same_bytes(t, ramp(0, 7, DType::f32)));
    int theirs = 0;
    MPI_Recv(&theirs, 1, MPI_INT, 0, 16, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(theirs == 42);
  }
  c.barrier();
}

TEST_CASE("mpi: non-blocking calls complete in issue order and wait() returns", "[mpi]") {
  MpiCommunicator& c = world();
  const int r = c.rank(), n = c.size();
  Tensor a = ramp(r, 100, DType::f32),
         b = r == n - 1 ? pattern(r, 50, DType::i64) : zeros({50}, {.dtype = DType::i64});
  Tensor ring = ramp(r, 333, DType::f64), blocking = ramp(r, 10, DType::bf16);
  Tensor m = ramp(r, 7, DType::f16);
  std::vector<Work> work;
  work.push_back(c.allreduce_async(a));
  work.push_back(c.broadcast_async(b, n - 1));
  work.push_back(c.barrier_async());
  work.push_back(c.run_async([&c, &ring] { ring_allreduce(c, ring, ReduceOp::avg); }));
  c.allreduce(blocking);  // queued behind the pending work
  work.push_back(c.allreduce_async(m, ReduceOp::max));
  for (Work& w : work) w.wait();
  for (Work& w : work) CHECK(w.is_completed());
  CHECK(check_ramp_reduced(a, ReduceOp::sum, n) == "");
  CHECK(same_bytes(b, pattern(n - 1, 50, DType::i64)));
  CHECK(check_ramp_reduced(ring, ReduceOp::avg, n) == "");
  CHECK(check_ramp_reduced(blocking, ReduceOp::sum, n) == "");
  CHECK(check_ramp_reduced(m, ReduceOp::max, n) == "");
}

TEST_CASE("mpi: stoke's ring over MPI equals MPI's native collectives", "[mpi]") {
  MpiCommunicator& c = world();
  // f32 data is not integer-valued (the sums round, in a different order); positive, so that no
  // sum cancels and |sum| = sum |x|: each order is within (N - 1) u |sum| of the exact sum, and
  // avg rounds once more, so the two agree to 2 N u = N 2^-23 = (N + 1) eps_of(f32) at most. f64
  // data is integer-valued: exact. Half types: the ring rounds after each of its N - 1 adds,
  // native once (eps_of is 2u of the dtype, a factor 2 of margin).
  auto input = [&](int64_t n, DType dtype) {
    if (dtype == DType::f64) return ramp(c.rank(), n, dtype);
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = 3 + value_of(c.rank(), i);
    return from_vector<double>(v, {n}, {.dtype = dtype});
  };
  auto close = [&](const Tensor& ring, const Tensor& native) -> std::string {
    const std::vector<double> a = ring.to_vector<double>(), b = native.to_vector<double>();
    const double rel = ring.dtype() == DType::f64 ? 0.0 : (c.size() + 1) * eps_of(ring.dtype());
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::fabs(a[i] - b[i]) <= rel * std::fabs(b[i])))
        return detail::str_cat("element ", i, ": ring ", a[i], ", native ", b[i]);
    return a.size() == b.size() ? "" : "lengths differ";
  };
  std::vector<int64_t> lengths(std::begin(kLengths), std::end(kLengths));
  lengths.push_back((int64_t{1} << 20) + 3);
  for (DType dtype : kFloatDtypes)
    for (int64_t n : lengths)
      for (ReduceOp op : kReduceOps) {
        if (n > 1000 && (dtype != DType::f32 || op != ReduceOp::sum)) continue;
        INFO(dtype << " n=" << n << " " << reduce_op_name(op));
        Tensor ring = input(n, dtype), native = input(n, dtype);
        ring_allreduce(c, ring, op);
        c.allreduce(native, op);
        CHECK(close(ring, native) == "");
        if (n > 1000) continue;
        const Tensor in = input(n * c.size(), dtype);
        Tensor ring_out = empty({n}, {.dtype = dtype}), native_out = empty({n}, {.dtype = dtype});
        ring_reduce_scatter(c, in, ring_out, op);
        c.reduce_scatter(in, native_out, op);
        CHECK(close(ring_out, native_out) == "");
        Tensor ring_all = empty({n * c.size()}, {.dtype = dtype}),
               native_all = empty({n * c.size()}, {.dtype = dtype});
        ring_allgather(c, input(n, dtype), ring_all);
        c.allgather(input(n, dtype), native_all);
        CHECK(same_bytes(ring_all, native_all));
      }
}
