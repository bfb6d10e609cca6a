// Every collective, native (the in-process engine) and stoke's ring, against a reference computed
// on the test thread, for N = 1..8 ranks, lengths 0, 1, 7, 1000 (and 2^20 + 3 for a few N), each
// floating dtype, sum, avg and max.
#include <catch2/catch.hpp>

#include <atomic>

#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

enum class Algo { native, ring };
const char* algo_name(Algo a) {
  return a == Algo::ring ? "ring" : "native";
}

constexpr DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};
constexpr int64_t kLengths[] = {0, 1, 7, 1000};
constexpr int64_t kBig = (int64_t{1} << 20) + 3;

std::vector<Tensor> inputs(int ranks, int64_t n, DType dtype) {
  std::vector<Tensor> in;
  for (int r = 0; r < ranks; ++r) in.push_back(make_input(r, n, dtype));
  return in;
}

std::vector<std::vector<double>> values(const std::vector<Tensor>& ts) {
  std::vector<std::vector<double>> v;
  for (const Tensor& t : ts) v.push_back(t.to_vector<double>());
  return v;
}

// Runs one allreduce configuration; "" on success, else what went wrong.
std::string allreduce_case(Algo algo, int ranks, int64_t n, DType dtype, ReduceOp op,
                           RingOptions ring_options = {}) {
  std::vector<Tensor> t = inputs(ranks, n, dtype);
  const Reference ref = reduce_reference(values(t), op, dtype);
  run_ranks(ranks, [&](Communicator& c) {
    if (algo == Algo::ring)
      ring_allreduce(c, t[c.rank()], op, ring_options);
    else
      c.allreduce(t[c.rank()], op);
  });
  for (int r = 0; r < ranks; ++r) {
    const std::string bad = check_close(t[r].to_vector<double>(), ref);
    if (!bad.empty()) return "rank " + std::to_string(r) + ": " + bad;
    if (!same_bytes(t[r], t[0])) return "rank " + std::to_string(r) + " differs from rank 0";
  }
  return "";
}

std::string reduce_scatter_case(Algo algo, int ranks, int64_t block, DType dtype, ReduceOp op) {
  std::vector<Tensor> in = inputs(ranks, block * ranks, dtype), out;
  for (int r = 0; r < ranks; ++r) out.push_back(empty({block}, {.dtype = dtype}));
  const Reference ref = reduce_reference(values(in), op, dtype);
  run_ranks(ranks, [&](Communicator& c) {
    const int r = c.rank();
    if (algo == Algo::ring)
      ring_reduce_scatter(c, in[r], out[r], op);
    else
      c.reduce_scatter(in[r], out[r], op);
  });
  for (int r = 0; r < ranks; ++r) {
    const std::string bad = check_close(out[r].to_vector<double>(), ref, r * block);
    if (!bad.empty()) return "rank " + std::to_string(r) + ": " + bad;
    // the input is left as it was
    if (!same_bytes(in[r], make_input(r, block * ranks, dtype)))
      return "rank " + std::to_string(r) + ": the input was modified";
  }
  return "";
}

std::string allgather_case(Algo algo, int ranks, int64_t block, DType dtype) {
  std::vector<Tensor> in = inputs(ranks, block, dtype), out;
  for (int r = 0; r < ranks; ++r) out.push_back(empty({block * ranks}, {.dtype = dtype}));
  run_ranks(ranks, [&](Communicator& c) {
    const int r = c.rank();
    if (algo == Algo::ring)
      ring_allgather(c, in[r], out[r]);
    else
      c.allgather(in[r], out[r]);
  });
  for (int r = 0; r < ranks; ++r)
    for (int k = 0; k < ranks; ++k)
      if (!same_bytes(out[r].narrow(0, k * block, block).contiguous(), in[k]))
        return "rank " + std::to_string(r) + ": block " + std::to_string(k) + " is wrong";
  return "";
}

}  // namespace

TEST_CASE("allreduce: native and ring match the f64 reference, N = 1..8, every dtype and op",
          "[dist]") {
  for (Algo algo : {Algo::native, Algo::ring})
    for (int ranks = 1; ranks <= 8; ++ranks)
      for (int64_t n : kLengths)
        for (DType dtype : kDtypes)
          for (ReduceOp op : kOps) {
            INFO(algo_name(algo) << " N=" << ranks << " n=" << n << " " << dtype << " "
                                 << reduce_op_name(op));
            CHECK(allreduce_case(algo, ranks, n, dtype, op) == "");
          }
}

TEST_CASE("allreduce: 2^20 + 3 elements, native and ring, N = 2, 3, 5", "[dist]") {
  for (Algo algo : {Algo::native, Algo::ring})
    for (int ranks : {2, 3, 5})
      for (DType dtype : {DType::f32, DType::bf16})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          if (dtype == DType::bf16 && ranks != 3) continue;
          INFO(algo_name(algo) << " N=" << ranks << " " << dtype << " " << reduce_op_name(op));
          CHECK(allreduce_case(algo, ranks, kBig, dtype, op) == "");
        }
}

TEST_CASE("ring allreduce: small segments pipeline each chunk in many pieces", "[dist]") {
  // 12 bytes: 3 f32 or 6 f16 elements per segment, so chunks end in a partial segment.
  for (int ranks : {2, 3, 4, 7})
    for (int64_t n : {7, 100, 1000})
      for (DType dtype : {DType::f32, DType::f16}) {
        INFO("N=" << ranks << " n=" << n << " " << dtype);
        CHECK(allreduce_case(Algo::ring, ranks, n, dtype, ReduceOp::sum, {.segment_bytes = 12}) ==
              "");
      }
}

TEST_CASE("reduce_scatter: native and ring match the f64 reference, N = 1..8", "[dist]") {
  for (Algo algo : {Algo::native, Algo::ring})
    for (int ranks = 1; ranks <= 8; ++ranks)
      for (int64_t block : kLengths)
        for (DType dtype : kDtypes)
          for (ReduceOp op : kOps) {
            INFO(algo_name(algo) << " N=" << ranks << " block=" << block << " " << dtype << " "
                                 << reduce_op_name(op));
            CHECK(reduce_scatter_case(algo, ranks, block, dtype, op) == "");
          }
}

TEST_CASE("allgather: native and ring gather every rank's block in rank order, N = 1..8",
          "[dist]") {
  for (Algo algo : {Algo::native, Algo::ring})
    for (int ranks = 1; ranks <= 8; ++ranks)
      for (int64_t block : kLengths)
        for (DType dtype : kDtypes) {
          INFO(algo_name(algo) << " N=" << ranks << " block=" << block << " " << dtype);
          CHECK(allgather_case(algo, ranks, block, dtype) == "");
        }
  INFO("2^20 + 3 elements per rank");
  CHECK(allgather_case(Algo::ring, 3, kBig, DType::f32) == "");
  CHECK(allgather_case(Algo::native, 3, kBig, DType::f32) == "");
}

TEST_CASE("broadcast: every rank gets the root's tensor, N = 1..8, any root", "[dist]") {
  for (int ranks = 1; ranks <= 8; ++ranks)
    for (int64_t n : kLengths)
      for (DType dtype : kDtypes)
        for (int root : {0, ranks / 2, ranks - 1}) {
          INFO("N=" << ranks << " n=" << n << " " << dtype << " root=" << root);
          std::vector<Tensor> t = inputs(ranks, n, dtype);
          const Tensor want = t[root].clone();
          run_ranks(ranks, [&](Communicator& c) { c.broadcast(t[c.rank()], root); });
          for (int r = 0; r < ranks; ++r) CHECK(same_bytes(t[r], want));
        }
}

TEST_CASE("barrier: no rank leaves before every rank arrived", "[dist]") {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    std::atomic<int> arrived{0};
    std::vector<int> seen(ranks, -1);
    run_ranks(ranks, [&](Communicator& c) {
      arrived.fetch_add(1);
      c.barrier();
      seen[c.rank()] = arrived.load();
      c.barrier();
    });
    for (int r = 0; r < ranks; ++r) CHECK(seen[r] == ranks);
  }
}

TEST_CASE("send and recv: tagged messages between ranks, in order per tag", "[dist]") {
  std::vector<std::vector<double>> got(3);
  run_ranks(3, [&](Communicator& c) {
    if (c.rank() == 0) {
      c.send(from_vector<double>({1, 2, 3}, {3}, {.dtype = DType::f64}), 1, /*tag=*/7);
      c.send(from_vector<double>({4}, {1}, {.dtype = DType::f64}), 1, /*tag=*/0);
      c.send(from_vector<double>({5, 6}, {2}, {.dtype = DType::f64}), 1, /*tag=*/7);
    } else if (c.rank() == 1) {
      Tensor a = empty({1}, {.dtype = DType::f64}), b = empty({3}, {.dtype = DType::f64}),
             d = empty({2}, {.dtype = DType::f64});
      c.recv(a, 0, 0);  // tag 0 first although it was sent second
      c.recv(b, 0, 7);
      c.recv(d, 0, 7);
      got[1] = a.to_vector<double>();
      for (double v : b.to_vector<double>()) got[1].push_back(v);
      for (double v : d.to_vector<double>()) got[1].push_back(v);
    }
    // A shift around the ring with sendrecv.
    Tensor mine = full({2}, c.rank()), from_prev = empty({2});
    c.sendrecv(mine, (c.rank() + 1) % c.size(), from_prev, (c.rank() + 2) % c.size(), 3);
    got[c.rank()].push_back(from_prev.to_vector<float>()[0]);
  });
  CHECK(got[1] == std::vector<double>{4, 1, 2, 3, 5, 6, 0});
  CHECK(got[0] == std::vector<double>{2});
  CHECK(got[2] == std::vector<double>{1});
}
