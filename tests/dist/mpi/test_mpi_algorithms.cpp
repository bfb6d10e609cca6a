// stoke's own collectives over the MPI engine, on every rank of the job (np 2, 3 and 4 in ctest):
// isend/irecv (MPI_Isend/MPI_Irecv), the pipelined and blocking ring, the tree and halving-doubling
// against closed forms and MPI's native allreduce, their message counts, and the tuner.
#include <catch2/catch.hpp>

#include <bit>

#include "mpi_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

enum class Algo { ring, ring_blocking, tree, rhd, rhd_blocking };
constexpr Algo kAlgos[] = {Algo::ring, Algo::ring_blocking, Algo::tree, Algo::rhd,
                           Algo::rhd_blocking};

const char* name_of(Algo a) {
  switch (a) {
    case Algo::ring:
      return "ring";
    case Algo::ring_blocking:
      return "ring (blocking)";
    case Algo::tree:
      return "tree";
    case Algo::rhd:
      return "rhd";
    case Algo::rhd_blocking:
      return "rhd (blocking)";
  }
  return "?";
}

void run_algo(Algo a, Communicator& c, Tensor& t, ReduceOp op, CollectiveOptions o = {}) {
  o.pipelined = a != Algo::ring_blocking && a != Algo::rhd_blocking;
  if (a == Algo::tree) return tree_allreduce(c, t, op, o);
  if (a == Algo::rhd || a == Algo::rhd_blocking) return rhd_allreduce(c, t, op, o);
  ring_allreduce(c, t, op, o);
}

}  // namespace

TEST_CASE("mpi: isend/irecv match in post order, payloads past the eager limit too", "[mpi]") {
  MpiCommunicator& c = world();
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  // Three messages to the next rank on one tag, received into three posted receives waited for
  // in reverse order; 1000 elements, above the eager limit.
  Tensor a = empty({3}, {.dtype = DType::f64}), b = empty({1000}), d = empty({0});
  Request ra = c.irecv(a, prev, 4), rb = c.irecv(b, prev, 4), rd = c.irecv(d, prev, 4);
  Request sa = c.isend(ramp(c.rank(), 3, DType::f64), next, 4);
  Request sb = c.isend(ramp(c.rank(), 1000, DType::f32), next, 4);
  Request sd = c.isend(empty({0}), next, 4);
  c.wait(rd);
  c.wait(rb);
  c.wait(ra);
  for (Request* r : {&sd, &sb, &sa}) c.wait(*r);
  CHECK(same_bytes(a, ramp(prev, 3, DType::f64)));
  CHECK(same_bytes(b, ramp(prev, 1000, DType::f32)));
  CHECK_FALSE(ra.pending());
}

TEST_CASE("mpi: an irecv of the wrong count fails at its wait, and the channel goes on", "[mpi]") {
  MpiCommunicator& c = world();
  if (c.rank() == 0) {
    Request s = c.isend(ramp(0, 5, DType::f32), 1, 9);
    c.wait(s);
    c.send(ramp(0, 2, DType::f32), 1, 9);
  } else if (c.rank() == 1) {
    Tensor t = empty({4});
    Request r = c.irecv(t, 0, 9);
    CHECK_THROWS_WITH(c.wait(r), Catch::Contains("rank 1 expected 4 elements, rank 0 sent 5"));
    Tensor next = empty({2});
    c.recv(next, 0, 9);  // the 5 elements were drained: this is the next message
    CHECK(same_bytes(next, ramp(0, 2, DType::f32)));
  }
  c.barrier();
}

TEST_CASE("mpi: ring, tree and rhd equal the closed forms, every dtype, op and length", "[mpi]") {
  MpiCommunicator& c = world();
  for (Algo a : kAlgos)
    for (DType dtype : kFloatDtypes)
      for (int64_t n : {0, 1, 3, 7, 1000})  // 3 is shorter than the ranks at np 4
        for (ReduceOp op : kReduceOps) {
          INFO(name_of(a) << " " << dtype << " n=" << n << " " << reduce_op_name(op));
          Tensor t = ramp(c.rank(), n, dtype);
          // Segments of 40 bytes: several per message at n = 1000.
          run_algo(a, c, t, op, {.segment_bytes = 40});
          CHECK(check_ramp_reduced(t, op, c.size()) == "");
        }
}

TEST_CASE("mpi: ring, tree and rhd within rounding of MPI's native allreduce", "[mpi]") {
  MpiCommunicator& c = world();
  // Positive non-integers: the sums round, in another order than MPI's. Each is within N - 1
  // roundings (N + 1 eps with the division, dist_util.h's bound) of the exact sum, so within twice
  // that of each other.
  for (Algo a : kAlgos)
    for (DType dtype : {DType::f32, DType::bf16})
      for (int64_t n : {int64_t{1000}, (int64_t{1} << 18) + 3}) {
        INFO(name_of(a) << " " << dtype << " n=" << n);
        std::vector<double> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[i] = 3 + value_of(c.rank(), i);
        Tensor ours = from_vector<double>(v, {n}, {.dtype = dtype}), native = ours.clone();
        run_algo(a, c, ours, ReduceOp::avg);
        c.allreduce(native, ReduceOp::avg);
        const std::vector<double> x = ours.to_vector<double>(), y = native.to_vector<double>();
        const double rel = 2 * (c.size() + 1) * eps_of(dtype);
        int64_t bad = 0;
        for (size_t i = 0; i < x.size(); ++i) bad += !(std::fabs(x[i] - y[i]) <= rel * y[i]);
        CHECK(bad == 0);
      }
}

TEST_CASE("mpi: rhd reduce_scatter and allgather equal MPI's", "[mpi]") {
  MpiCommunicator& c = world();
  for (DType dtype : kFloatDtypes)
    for (int64_t block : {0, 1, 7, 1000})
      for (ReduceOp op : kReduceOps) {
        INFO(dtype << " block=" << block << " " << reduce_op_name(op));
        const Tensor in = ramp(c.rank(), block * c.size(), dtype);
        Tensor out = empty({block}, {.dtype = dtype});
        rhd_reduce_scatter(c, in, out, op, {.segment_bytes = 40});
        CHECK(check_ramp_reduced(out, op, c.size(), c.rank() * block) == "");
        CHECK(same_bytes(in, ramp(c.rank(), block * c.size(), dtype)));
        Tensor all = empty({block * c.size()}, {.dtype = dtype}),
               native = empty({block * c.size()}, {.dtype = dtype});
        rhd_allgather(c, ramp(c.rank(), block, dtype), all, {.segment_bytes = 40});
        c.allgather(ramp(c.rank(), block, dtype), native);
        CHECK(same_bytes(all, native));
      }
}

TEST_CASE("mpi: messages per rank are the closed forms: ring 2(N-1), rhd 2 log2 N (+ the fold)",
          "[mpi]") {
  MpiCommunicator& c = world();
  const int n = c.size(), r = c.rank();
  const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int rem = n - p2, halvings = std::countr_zero(static_cast<unsigned>(p2));
  auto count = [&](Algo a, CollectiveOptions o = {}) {
    Tensor t = ramp(r, 96, DType::f32);
    const int64_t before = c.p2p_sent().messages;
    run_algo(a, c, t, ReduceOp::sum, o);
    return c.p2p_sent().messages - before;
  };
  CHECK(count(Algo::ring) == 2 * (n - 1));
  CHECK(count(Algo::ring_blocking) == 2 * (n - 1));
  // 96 elements over N ranks in segments of 4: every chunk's segments travel, 2(N-1) steps.
  int64_t segs = 0;
  for (int k = 0; k < n - 1; ++k) {
    const RingChunk ch = ring_chunk(96, n, (r - k - 1 + n) % n);
    segs += std::max<int64_t>(1, (ch.end - ch.begin + 3) / 4);
  }
  for (int k = 0; k < n - 1; ++k) {
    const RingChunk ch = ring_chunk(96, n, (r - k + n) % n);
    segs += std::max<int64_t>(1, (ch.end - ch.begin + 3) / 4);
  }
  CHECK(count(Algo::ring, {.segment_bytes = 16}) == segs);
  const int64_t expect_rhd = r < 2 * rem && r % 2 == 0 ? 1 : 2 * halvings + (r < 2 * rem ? 1 : 0);
  CHECK(count(Algo::rhd) == expect_rhd);
  // The tree: every rank but the root sends once up and is sent to once down.
  Tensor sent =
      from_vector<double>({static_cast<double>(count(Algo::tree))}, {1}, {.dtype = DType::f64});
  c.allreduce(sent, ReduceOp::sum);
  CHECK(sent.to_vector<double>()[0] == 2 * (n - 1));
}

TEST_CASE("mpi: the tuner calibrates once, the same model on every rank, and auto reduces right",
          "[mpi]") {
  MpiCommunicator& c = world();
  const auto m = allreduce_model(c, Device::cpu(), {.large_bytes = 256 << 10, .reps = 3});
  CHECK(m->ranks == c.size());
  CHECK(allreduce_model(c) == m);
  // Every rank's figures against rank 0's: broadcast rank 0's, compare bit for bit.
  std::vector<double> mine;
  std::vector<const CostCurve*> curves = {
      &m->exchange,        &m->oneway, &m->reduce, &m->native_allreduce, &m->native_reduce_scatter,
      &m->native_allgather};
  for (const auto& [a, c] : m->measured_allreduce) curves.push_back(&c);
  CHECK(m->measured_allreduce.size() == 4);
  for (const CostCurve* c : curves)
    for (const auto& [bytes, seconds] : c->points) {
      mine.push_back(bytes);
      mine.push_back(seconds);
    }
  Tensor r0 = from_vector<double>(mine, {static_cast<int64_t>(mine.size())}, {.dtype = DType::f64});
  c.broadcast(r0, 0);
  CHECK(r0.to_vector<double>() == mine);
  for (int64_t n : {1, 1000, 300000}) {
    Tensor t = ramp(c.rank(), n, DType::f32);
    allreduce(c, t, ReduceOp::sum, AllreduceAlgorithm::automatic);
    CHECK(check_ramp_reduced(t, ReduceOp::sum, c.size()) == "");
  }
}
