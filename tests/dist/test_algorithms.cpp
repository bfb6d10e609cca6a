// stoke's own allreduce algorithms over the in-process engine (ranks are threads, so
// ThreadSanitizer sees them): the pipelined and the blocking ring, the binomial tree and recursive
// halving-doubling, against an f64 reference computed on the test thread and against the engine's
// native allreduce, N = 1..5, every floating dtype, sum/avg/max, lengths 0 to 1000 (below N too);
// halving-doubling's reduce-scatter and allgather; and the message counts of each against the
// textbook's closed forms.
#include <catch2/catch.hpp>

#include <bit>
#include <functional>

#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

enum class Algo { native, ring, ring_blocking, tree, tree_blocking, rhd, rhd_blocking };
constexpr Algo kOurs[] = {Algo::ring,          Algo::ring_blocking, Algo::tree,
                          Algo::tree_blocking, Algo::rhd,           Algo::rhd_blocking};

const char* name_of(Algo a) {
  switch (a) {
    case Algo::native:
      return "native";
    case Algo::ring:
      return "ring";
    case Algo::ring_blocking:
      return "ring (blocking)";
    case Algo::tree:
      return "tree";
    case Algo::tree_blocking:
      return "tree (blocking)";
    case Algo::rhd:
      return "rhd";
    case Algo::rhd_blocking:
      return "rhd (blocking)";
  }
  return "?";
}

void run_algo(Algo a, Communicator& c, Tensor& t, ReduceOp op, CollectiveOptions o = {}) {
  const bool blocking =
      a == Algo::ring_blocking || a == Algo::tree_blocking || a == Algo::rhd_blocking;
  o.pipelined = !blocking;
  switch (a) {
    case Algo::native:
      return c.allreduce(t, op);
    case Algo::ring:
    case Algo::ring_blocking:
      return ring_allreduce(c, t, op, o);
    case Algo::tree:
    case Algo::tree_blocking:
      return tree_allreduce(c, t, op, o);
    case Algo::rhd:
    case Algo::rhd_blocking:
      return rhd_allreduce(c, t, op, o);
  }
}

constexpr DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};
// 2 and 3 are shorter than the tensor is cut into at N = 4, 5: empty chunks and blocks.
constexpr int64_t kLengths[] = {0, 1, 2, 3, 7, 1000};

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

// One allreduce by `a` and one native, from the same inputs; "" on success. Each must be within
// the reference's bound (any order of N - 1 rounded adds), so they differ by at most twice it;
// every rank must hold the same bytes (the final phase of each algorithm copies, never reduces).
std::string allreduce_case(Algo a, int ranks, int64_t n, DType dtype, ReduceOp op,
                           CollectiveOptions o = {}) {
  std::vector<Tensor> t = inputs(ranks, n, dtype), native = inputs(ranks, n, dtype);
  const Reference ref = reduce_reference(values(t), op, dtype);
  run_ranks(ranks, [&](Communicator& c) {
    run_algo(a, c, t[c.rank()], op, o);
    c.allreduce(native[c.rank()], op);
  });
  for (int r = 0; r < ranks; ++r) {
    const std::vector<double> got = t[r].to_vector<double>(), nat = native[r].to_vector<double>();
    const std::string bad = check_close(got, ref);
    if (!bad.empty()) return "rank " + std::to_string(r) + ": " + bad;
    for (size_t i = 0; i < got.size(); ++i)
      // ref.tol bounds any summation order (dist_util.h), stoke's and native's alike: each is
      // within tol of the exact value, so they differ by at most 2 tol (triangle inequality).
      if (!(std::fabs(got[i] - nat[i]) <= 2 * ref.tol[i]))
        return "rank " + std::to_string(r) + ": element " + std::to_string(i) + " is " +
               std::to_string(got[i]) + ", native's " + std::to_string(nat[i]);
    if (!same_bytes(t[r], t[0])) return "rank " + std::to_string(r) + " differs from rank 0";
  }
  return "";
}

}  // namespace

TEST_CASE("dist algorithms: ring, tree and rhd match the f64 reference and native, N = 1..5",
          "[dist]") {
  for (Algo a : kOurs)
    for (int ranks = 1; ranks <= 5; ++ranks)
      for (int64_t n : kLengths)
        for (DType dtype : kDtypes)
          for (ReduceOp op : kOps) {
            INFO(name_of(a) << " N=" << ranks << " n=" << n << " " << dtype << " "
                            << reduce_op_name(op));
            CHECK(allreduce_case(a, ranks, n, dtype, op) == "");
          }
}

TEST_CASE("dist algorithms: small segments cut every message in many pieces", "[dist]") {
  // 12 bytes: 3 f32 or 6 f16 elements per segment, so ranges end in a partial segment.
  for (Algo a : kOurs)
    for (int ranks : {2, 3, 4, 5})
      for (int64_t n : {7, 100, 1000})
        for (DType dtype : {DType::f32, DType::f16}) {
          INFO(name_of(a) << " N=" << ranks << " n=" << n << " " << dtype);
          CHECK(allreduce_case(a, ranks, n, dtype, ReduceOp::sum, {.segment_bytes = 12}) == "");
        }
}

TEST_CASE("dist algorithms: 2^20 + 3 elements over 2, 3 and 5 ranks", "[dist]") {
  for (Algo a : {Algo::ring, Algo::tree, Algo::rhd})
    for (int ranks : {2, 3, 5}) {
      INFO(name_of(a) << " N=" << ranks);
      CHECK(allreduce_case(a, ranks, (int64_t{1} << 20) + 3, DType::f32, ReduceOp::avg) == "");
    }
}

TEST_CASE("dist algorithms: rhd reduce_scatter and allgather, N = 1..5, the input untouched",
          "[dist]") {
  for (int ranks = 1; ranks <= 5; ++ranks)
    for (int64_t block : {0, 1, 7, 1000})
      for (DType dtype : kDtypes) {
        for (ReduceOp op : kOps) {
          INFO("reduce_scatter N=" << ranks << " block=" << block << " " << dtype << " "
                                   << reduce_op_name(op));
          std::vector<Tensor> in = inputs(ranks, block * ranks, dtype), out;
          for (int r = 0; r < ranks; ++r) out.push_back(empty({block}, {.dtype = dtype}));
          const Reference ref = reduce_reference(values(in), op, dtype);
          run_ranks(ranks, [&](Communicator& c) {
            rhd_reduce_scatter(c, in[c.rank()], out[c.rank()], op, {.segment_bytes = 20});
          });
          for (int r = 0; r < ranks; ++r) {
            CHECK(check_close(out[r].to_vector<double>(), ref, r * block) == "");
            CHECK(same_bytes(in[r], make_input(r, block * ranks, dtype)));
          }
        }
        INFO("allgather N=" << ranks << " block=" << block << " " << dtype);
        std::vector<Tensor> in = inputs(ranks, block, dtype), out;
        for (int r = 0; r < ranks; ++r) out.push_back(empty({block * ranks}, {.dtype = dtype}));
        run_ranks(ranks, [&](Communicator& c) {
          rhd_allgather(c, in[c.rank()], out[c.rank()], {.segment_bytes = 20});
        });
        for (int r = 0; r < ranks; ++r)
          for (int k = 0; k < ranks; ++k)
            CHECK(same_bytes(out[r].narrow(0, k * block, block).contiguous(), in[k]));
      }
}

TEST_CASE("dist algorithms: the binomial tree's links", "[dist]") {
  // N = 6: 0 -> {1, 2, 4}; 2 -> {3}; 4 -> {5}.
  const std::vector<std::vector<int>> children = {{1, 2, 4}, {}, {3}, {}, {5}, {}};
  const std::vector<int> parent = {-1, 0, 0, 2, 0, 4};
  for (int r = 0; r < 6; ++r) {
    const TreeLinks l = binomial_tree(6, r);
    CHECK(l.parent == parent[r]);
    CHECK(l.children == children[r]);
  }
  CHECK(binomial_tree(1, 0).children.empty());
}

namespace {

// Messages each rank sends in one allreduce of n f32 elements by `a`, counted by the communicator.
std::vector<int64_t> messages_per_rank(Algo a, int ranks, int64_t n, CollectiveOptions o = {}) {
  std::vector<int64_t> sent(static_cast<size_t>(ranks));
  run_ranks(ranks, [&](Communicator& c) {
    Tensor t = make_input(c.rank(), n, DType::f32);
    const int64_t before = c.p2p_sent().messages;
    run_algo(a, c, t, ReduceOp::sum, o);
    sent[static_cast<size_t>(c.rank())] = c.p2p_sent().messages - before;
  });
  return sent;
}

int64_t total(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

}  // namespace

TEST_CASE("dist algorithms: messages per rank are the textbook's 2(N-1), 2(N-1) in all, 2 log2 N",
          "[dist]") {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    INFO("N=" << ranks);
    const int levels =
        ranks > 1 ? std::countr_zero(std::bit_ceil(static_cast<unsigned>(ranks))) : 0;
    const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(ranks)));
    const int rem = ranks - p2, halvings = std::countr_zero(static_cast<unsigned>(p2));
    for (bool pipelined : {true, false}) {
      const CollectiveOptions o{.pipelined = pipelined};
      // Ring: one message per step, 2(N-1) steps.
      for (int64_t m :
           messages_per_rank(pipelined ? Algo::ring : Algo::ring_blocking, ranks, 100, o))
        CHECK(m == 2 * (ranks - 1));
      // Tree: every rank but the root sends once up, and is sent to once down; the root sends
      // to its ceil(log2 N) children.
      const auto tree =
          messages_per_rank(pipelined ? Algo::tree : Algo::tree_blocking, ranks, 100, o);
      CHECK(total(tree) == 2 * (ranks - 1));
      CHECK(tree[0] == levels);
      // Halving-doubling: 2 log2 N' exchanges per rank of the N' that take part; a folded pair's
      // even rank sends its tensor once, the odd one sends the result back once more.
      const auto rhd = messages_per_rank(pipelined ? Algo::rhd : Algo::rhd_blocking, ranks, 100, o);
      for (int r = 0; r < ranks; ++r) {
        INFO("rank " << r);
        if (r < 2 * rem && r % 2 == 0)
          CHECK(rhd[r] == 1);
        else
          CHECK(rhd[r] == 2 * halvings + (r < 2 * rem ? 1 : 0));
      }
    }
  }
  // Segments multiply the ring's messages: N = 4, 4 x 3 segments of 8 elements.
  for (int64_t m : messages_per_rank(Algo::ring, 4, 96, {.segment_bytes = 32}))
    CHECK(m == 2 * 3 * 3);
  // And the tree's: 96 elements in 12 segments, each up and down once per link.
  CHECK(total(messages_per_rank(Algo::tree, 4, 96, {.segment_bytes = 32})) == 12 * 2 * 3);
}

TEST_CASE("dist algorithms: bytes per rank, ring and rhd 2(N-1)/N of the tensor, tree 2(N-1) n",
          "[dist]") {
  for (int ranks : {2, 4, 8}) {
    const int64_t n = 240;  // divisible by every N here
    std::vector<int64_t> ring(ranks), rhd(ranks), tree(ranks);
    run_ranks(ranks, [&](Communicator& c) {
      auto bytes = [&](Algo a) {
        Tensor t = make_input(c.rank(), n, DType::f32);
        const int64_t before = c.p2p_sent().bytes;
        run_algo(a, c, t, ReduceOp::sum);
        return c.p2p_sent().bytes - before;
      };
      ring[c.rank()] = bytes(Algo::ring);
      rhd[c.rank()] = bytes(Algo::rhd);
      tree[c.rank()] = bytes(Algo::tree);
    });
    INFO("N=" << ranks);
    for (int r = 0; r < ranks; ++r) {
      CHECK(ring[r] == 2 * (ranks - 1) * n * 4 / ranks);
      CHECK(rhd[r] == 2 * (ranks - 1) * n * 4 / ranks);
    }
    CHECK(total(tree) == 2 * (ranks - 1) * n * 4);
  }
}

TEST_CASE("dist algorithms: refused dtypes and shapes fail on every rank before a message moves",
          "[dist]") {
  for (auto fn : std::vector<std::function<void(Communicator&, Tensor&)>>{
           [](Communicator&c, Tensor&t) { tree_allreduce(c, t); },
           [](Communicator&c, Tensor&t) { rhd_allreduce(c, t); }}) {
    CHECK_THROWS_WITH(run_ranks(3,
                                [&](Communicator& c) {
                                  Tensor t = zeros({4}, {.dtype = DType::i32});
                                  fn(c, t);
                                }),
                      Catch::Contains("reductions take f32, f64, f16 or bf16 tensors, got i32"));
    CHECK_THROWS_WITH(run_ranks(2,
                                [&](Communicator& c) {
                                  Tensor t = zeros({4, 4}).transpose(0, 1);
                                  fn(c, t);
                                }),
                      Catch::Contains("must be a defined, contiguous tensor"));
  }
}
