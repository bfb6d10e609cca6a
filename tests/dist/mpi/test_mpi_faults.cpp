// The MPI engine's errors and options: mismatched collectives throw on every rank naming the
// collective and its number (and the communicator goes on working), mismatched receives name both
// counts, integer reductions are refused; check_args off, pieces (max_count), a sub-communicator.
// The hidden [watchdog] and [killed] cases end the job on purpose: ctest runs them on their own
// (run_expect_abort.cmake).
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <thread>

#include "mpi_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;
using Catch::Matchers::Contains;

TEST_CASE("mpi: mismatched collectives throw on every rank, then the communicator works on",
          "[mpi]") {
  MpiCommunicator c;  // a fresh one: its collectives are numbered from 0
  const int r = c.rank(), n = c.size();
  Tensor ok = ramp(r, 4, DType::f32);
  c.allreduce(ok);  // #0
  c.allreduce(ok);  // #1
  Tensor t = ones({r == 1 ? 999 : 1000});
  CHECK_THROWS_WITH(c.allreduce(t),
                    "stoke::allreduce #2: rank 1 has 999 elements, rank 0 has 1000");
  Tensor d = ones({3}, {.dtype = r == 1 ? DType::f64 : DType::f32});
  CHECK_THROWS_WITH(c.allreduce(d), "stoke::allreduce #3: rank 1 has dtype f64, rank 0 has f32");
  Tensor o = ones({3});
  CHECK_THROWS_WITH(c.allreduce(o, r == 1 ? ReduceOp::max : ReduceOp::sum),
                    "stoke::allreduce #4: rank 1 passed 2, rank 0 passed 0 (the reduce op or "
                    "root must agree)");
  // Each rank names its own call first; the message is the same everywhere.
  CHECK_THROWS_WITH(r == 1 ? c.broadcast(o, 0) : c.allreduce(o),
                    Contains("#5: rank 1 called broadcast #5 while rank 0 called allreduce #5"));
  CHECK_THROWS_WITH(c.broadcast(o, r == n - 1 ? 1 : 0),
                    Contains("broadcast #6: rank " + std::to_string(n - 1) + " passed 1"));
  Tensor out = empty({r == 1 ? 2 : 3});
  CHECK_THROWS_WITH(c.reduce_scatter(ones({out.numel() * n}), out),
                    "stoke::reduce_scatter #7: rank 1 has " + std::to_string(2 * n) +
                        " elements, rank 0 has " + std::to_string(3 * n));
  Tensor all = empty({(r == 1 ? 5 : 4) * n});
  CHECK_THROWS_WITH(c.allgather(ones({all.numel() / n}), all),
                    "stoke::allgather #8: rank 1 has 5 elements, rank 0 has 4");
  // In non-blocking work the error comes out of wait().
  Work w = c.allreduce_async(ones({r == 1 ? 5 : 6}));
  CHECK_THROWS_WITH(w.wait(), "stoke::allreduce #9: rank 1 has 5 elements, rank 0 has 6");
  // Integer reductions are refused on every rank, as by the in-process engine.
  Tensor i = ones({3}, {.dtype = DType::i32});
  CHECK_THROWS_WITH(c.allreduce(i),
                    "stoke::allreduce #10: reductions take f32, f64, f16 or bf16 tensors, got i32");
  // Nothing hangs or is left half-done: the next collectives are right.
  Tensor after = ramp(r, 1000, DType::f32);
  c.allreduce(after, ReduceOp::avg);
  CHECK(check_ramp_reduced(after, ReduceOp::avg, n) == "");
  c.barrier();
}

TEST_CASE("mpi: recv and sendrecv name the op, the ranks and both counts or dtypes", "[mpi]") {
  MpiCommunicator& c = world();
  if (c.rank() == 0) {
    c.send(ones({3}), 1);
    c.send(ones({4}, {.dtype = DType::f64}), 1);
    c.send(ramp(0, 4, DType::f32), 1);
  } else if (c.rank() == 1) {
    Tensor t = empty({4});
    CHECK_THROWS_WITH(c.recv(t, 0), "stoke::recv: rank 1 expected 4 elements, rank 0 sent 3");
    CHECK_THROWS_WITH(c.recv(t, 0), "stoke::recv: rank 1 expected f32, rank 0 sent f64");
    c.recv(t, 0);  // the mismatched payloads were drained: this is the third message
    CHECK(same_bytes(t, ramp(0, 4, DType::f32)));
  }
  // Around the ring, rank 0 sends one element too many: only rank 1 throws, and every rank's
  // payload still went out, so the next exchange is in step.
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  Tensor in = empty({4});
  if (c.rank() == 1)
    CHECK_THROWS_WITH(c.sendrecv(ones({4}), next, in, prev),
                      "stoke::sendrecv: rank 1 expected 4 elements, rank 0 sent 5");
  else
    c.sendrecv(ones({c.rank() == 0 ? 5 : 4}), next, in, prev);
  c.sendrecv(ramp(c.rank(), 4, DType::f32), next, in, prev);
  CHECK(same_bytes(in, ramp(prev, 4, DType::f32)));
  // A tag beyond MPI's range is refused before anything is sent.
  CHECK_THROWS_WITH(c.send(ones({1}), next, INT_MAX), Contains("stoke::send: tag 2147483647"));
}

TEST_CASE("mpi: with check_args off the collectives still compute the same results", "[mpi]") {
  MpiCommunicator c(MpiOptions{.check_args = false});
  const int r = c.rank(), n = c.size();
  Tensor t = ramp(r, 1000, DType::bf16);
  c.allreduce(t, ReduceOp::avg);
  CHECK(check_ramp_reduced(t, ReduceOp::avg, n) == "");
  Tensor out = empty({7}, {.dtype = DType::f64});
  c.reduce_scatter(ramp(r, 7 * n, DType::f64), out, ReduceOp::max);
  CHECK(check_ramp_reduced(out, ReduceOp::max, n, 7 * r) == "");
  Tensor all = empty({3 * n}, {.dtype = DType::i64});
  c.allgather(full({3}, r, {.dtype = DType::i64}), all);
  for (int k = 0; k < n; ++k) CHECK(all.to_vector<int64_t>()[3 * k] == k);
  Tensor b = full({5}, r);
  c.broadcast(b, n - 1);
  CHECK(b.to_vector<float>() == std::vector<float>(5, static_cast<float>(n - 1)));
  c.barrier();
}

TEST_CASE("mpi: past max_count elements, every call goes in pieces", "[mpi]") {
  // max_count 3 stands for MPI's INT_MAX: the same code paths with small tensors.
  MpiCommunicator c(MpiOptions{.max_count = 3});
  const int r = c.rank(), n = c.size();
  for (DType dtype : kFloatDtypes)
    for (int64_t len : {int64_t{3}, int64_t{7}, int64_t{1000}})
      for (ReduceOp op : kReduceOps) {
        INFO(dtype << " n=" << len << " " << reduce_op_name(op));
        Tensor t = ramp(r, len, dtype);
        c.allreduce(t, op);
        CHECK(check_ramp_reduced(t, op, n) == "");
        // block <= 3: MPI_Reduce_scatter_block; longer: reduced onto each rank in pieces
        Tensor out = empty({len}, {.dtype = dtype});
        c.reduce_scatter(ramp(r, len * n, dtype), out, op);
        CHECK(check_ramp_reduced(out, op, n, len * r) == "");
        Tensor all = empty({len * n}, {.dtype = dtype});
        c.allgather(ramp(r, len, dtype), all);
        for (int k = 0; k < n; ++k)
          CHECK(same_bytes(all.narrow(0, k * len, len).contiguous(), ramp(k, len, dtype)));
        Tensor b = r == 0 ? ramp(0, len, dtype) : zeros({len}, {.dtype = dtype});
        c.broadcast(b, 0);
        CHECK(same_bytes(b, ramp(0, len, dtype)));
      }
  // Point to point: rank r sends 2 + 3r elements, so neighbours cut different numbers of pieces.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor in = empty({2 + 3 * prev}, {.dtype = DType::f16});
  c.sendrecv(ramp(r, 2 + 3 * r, DType::f16), next, in, prev);
  CHECK(same_bytes(in, ramp(prev, 2 + 3 * prev, DType::f16)));
  if (r == 0) c.send(ramp(0, 10, DType::i64), 1, 5);
  if (r == 1) {
    Tensor t = empty({10}, {.dtype = DType::i64});
    c.recv(t, 0, 5);
    CHECK(same_bytes(t, ramp(0, 10, DType::i64)));
    Tensor wrong = empty({4}, {.dtype = DType::i64});  // 11 elements come, in 4 pieces
    CHECK_THROWS_WITH(c.recv(wrong, 0, 6),
                      "stoke::recv: rank 1 expected 4 elements, rank 0 sent 11");
  }
  if (r == 0) c.send(ramp(0, 11, DType::i64), 1, 6);
  Tensor ring = ramp(r, 100, DType::f32);
  ring_allreduce(c, ring, ReduceOp::sum, {.segment_bytes = 40});  // 10 elements a segment
  CHECK(check_ramp_reduced(ring, ReduceOp::sum, n) == "");
}

TEST_CASE("mpi: a communicator over a split of the world is its own group", "[mpi]") {
  MPI_Comm half = MPI_COMM_NULL;
  const int wr = world().rank(), wn = world().size();
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &half) == MPI_SUCCESS);
  {
    MpiCommunicator c(half);
    const int expected_size = wn / 2 + (wn % 2 == 1 && wr % 2 == 0 ? 1 : 0);
    CHECK(c.size() == expected_size);
    CHECK(c.rank() == wr / 2);
    Tensor t = ramp(c.rank(), 7, DType::f64);
    c.allreduce(t);
    CHECK(check_ramp_reduced(t, ReduceOp::sum, c.size()) == "");
  }
  MPI_Comm_free(&half);
}

// ctest (run_expect_abort.cmake): the job must end non-zero within seconds, with this message.
TEST_CASE("mpi: a rank that never calls the collective trips the watchdog", "[.][watchdog]") {
  MpiCommunicator c(MpiOptions{.timeout = std::chrono::seconds(1)});
  if (c.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // stalled, as if SIGSTOPped
    return;
  }
  Tensor t = ones({8});
  c.allreduce(t);  // "stoke::dist: allreduce #0 on rank 0 has waited 1 s (timeout); rank 1 did
                   // not arrive (...); aborting the job"
  FAIL("the allreduce returned although rank 1 never called it");
}

TEST_CASE("mpi: a rank killed mid-job ends the job, watchdog off", "[.][killed]") {
  MpiCommunicator c(MpiOptions{.timeout = std::chrono::milliseconds(0)});
  Tensor t = ones({8});
  c.allreduce(t);
  if (c.rank() == 1) std::raise(SIGKILL);
  c.allreduce(t);
  FAIL("the allreduce returned although rank 1 was killed");
}
