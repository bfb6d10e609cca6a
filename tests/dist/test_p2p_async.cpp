// Non-blocking point to point (Communicator::isend/irecv/wait): MPI's matching rule on the
// in-process engine, its errors, and the Communicator's default (deferred) implementation under an
// engine without non-blocking calls, which stoke's pipelined algorithms must run on too.
#include <catch2/catch.hpp>

#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

Tensor vec(std::vector<double> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector<double>(v, {n}, {.dtype = DType::f64});
}

// An engine with blocking calls only: every do_* forwards to an in-process communicator, and
// isend/irecv/wait are the Communicator's defaults.
class BlockingOnly final : public Communicator {
 public:
  explicit BlockingOnly(Communicator& inner) : inner_(inner) {}
  ~BlockingOnly() override { stop_worker(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }

 protected:
  void do_send(const Tensor& t, int dst, int tag) override { inner_.send(t, dst, tag); }
  void do_recv(Tensor& t, int src, int tag) override { inner_.recv(t, src, tag); }
  void do_sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag) override {
    inner_.sendrecv(out, dst, in, src, tag);
  }
  void do_allreduce(Tensor& t, ReduceOp op) override { inner_.allreduce(t, op); }
  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    inner_.reduce_scatter(in, out, op);
  }
  void do_allgather(const Tensor& in, Tensor& out) override { inner_.allgather(in, out); }
  void do_broadcast(Tensor& t, int root) override { inner_.broadcast(t, root); }
  void do_barrier() override { inner_.barrier(); }

 private:
  Communicator& inner_;
};

}  // namespace

TEST_CASE("dist p2p: receives match in post order whatever the order of the waits", "[dist]") {
  std::vector<std::vector<double>> got(4);
  // Catch's assertions are not thread-safe: the rank threads record, the test thread checks.
  bool a_pending_after_wait = true, ry_pending_at_post = false;
  run_ranks(2, [&](Communicator& c) {
    if (c.rank() == 0) {
      Request a = c.isend(vec({1, 2}), 1, 5);
      Request b = c.isend(vec({3}), 1, 6);  // another tag
      Request d = c.isend(vec({4, 5}), 1, 5);
      c.wait(b);
      c.wait(a);
      c.wait(d);
      a_pending_after_wait = a.pending();
      return;
    }
    Tensor x = empty({2}, {.dtype = DType::f64}), y = empty({2}, {.dtype = DType::f64}),
           z = empty({1}, {.dtype = DType::f64});
    Request rx = c.irecv(x, 0, 5), ry = c.irecv(y, 0, 5), rz = c.irecv(z, 0, 6);
    ry_pending_at_post = ry.pending();
    c.wait(ry);  // completes rx first: it was posted first on the same rank and tag
    c.wait(rz);
    c.wait(rx);
    c.wait(rx);  // a request waited for is no longer pending: nothing happens
    got[0] = x.to_vector<double>();
    got[1] = y.to_vector<double>();
    got[2] = z.to_vector<double>();
  });
  CHECK_FALSE(a_pending_after_wait);
  CHECK(ry_pending_at_post);
  CHECK(got[0] == std::vector<double>{1, 2});
  CHECK(got[1] == std::vector<double>{4, 5});
  CHECK(got[2] == std::vector<double>{3});
}

TEST_CASE("dist p2p: a blocking recv after a pending irecv gets the next message", "[dist]") {
  std::vector<double> first, second;
  run_ranks(2, [&](Communicator& c) {
    if (c.rank() == 0) {
      c.send(vec({7}), 1);
      c.send(vec({8}), 1);
      return;
    }
    Tensor a = empty({1}, {.dtype = DType::f64}), b = empty({1}, {.dtype = DType::f64});
    Request r = c.irecv(a, 0);
    c.recv(b, 0);
    c.wait(r);
    first = a.to_vector<double>();
    second = b.to_vector<double>();
  });
  CHECK(first == std::vector<double>{7});
  CHECK(second == std::vector<double>{8});
}

TEST_CASE("dist p2p: a receive of the wrong count fails at its wait, naming both counts",
          "[dist]") {
  CHECK_THROWS_WITH(run_ranks(2,
                              [](Communicator& c) {
                                if (c.rank() == 0) {
                                  Request r = c.isend(zeros({5}), 1);
                                  c.wait(r);
                                  return;
                                }
                                Tensor t = empty({4});
                                Request r = c.irecv(t, 0);
                                c.wait(r);
                              }),
                    Catch::Contains("rank 1 expected 4 elements, rank 0 sent 5"));
  CHECK_THROWS_WITH(run_ranks(2,
                              [](Communicator& c) {
                                Tensor t = empty({4});
                                c.irecv(t, 2);
                              }),
                    Catch::Contains("source rank 2 is outside the group of 2 ranks"));
}

TEST_CASE("dist p2p: the default isend/irecv (run at the wait) carries every algorithm", "[dist]") {
  for (int ranks : {2, 3, 4, 5}) {
    const int64_t n = 1001;
    std::vector<Tensor> ring, tree, rhd;
    for (int r = 0; r < ranks; ++r) {
      ring.push_back(make_input(r, n, DType::f32));
      tree.push_back(make_input(r, n, DType::f32));
      rhd.push_back(make_input(r, n, DType::f32));
    }
    std::vector<std::vector<double>> in;
    for (const Tensor& t : ring) in.push_back(t.to_vector<double>());
    const Reference ref = reduce_reference(in, ReduceOp::sum, DType::f32);
    run_ranks(ranks, [&](Communicator& inner) {
      BlockingOnly c(inner);
      // 64-byte segments: several in flight per step, so the deferred pairs are exercised.
      const CollectiveOptions o{.segment_bytes = 64};
      ring_allreduce(c, ring[c.rank()], ReduceOp::sum, o);
      tree_allreduce(c, tree[c.rank()], ReduceOp::sum, o);
      rhd_allreduce(c, rhd[c.rank()], ReduceOp::sum, o);
    });
    INFO("N=" << ranks);
    for (int r = 0; r < ranks; ++r) {
      CHECK(check_close(ring[r].to_vector<double>(), ref) == "");
      CHECK(check_close(tree[r].to_vector<double>(), ref) == "");
      CHECK(check_close(rhd[r].to_vector<double>(), ref) == "");
    }
  }
}

TEST_CASE("dist p2p: sends are counted per message and byte", "[dist]") {
  std::vector<P2pCounters> after(2);
  run_ranks(2, [&](Communicator& c) {
    const int peer = 1 - c.rank();
    Tensor in = empty({3});
    c.sendrecv(zeros({3}), peer, in, peer);
    Request s = c.isend(zeros({10}, {.dtype = DType::f64}), peer);
    Tensor big = empty({10}, {.dtype = DType::f64});
    Request r = c.irecv(big, peer);
    c.wait(s);
    c.wait(r);
    if (c.rank() == 0) c.send(zeros({0}), 1);
    if (c.rank() == 1) {
      Tensor z = empty({0});
      c.recv(z, 0);
    }
    after[c.rank()] = c.p2p_sent();
  });
  CHECK(after[0].messages == 3);
  CHECK(after[0].bytes == 12 + 80);
  CHECK(after[1].messages == 2);
  CHECK(after[1].bytes == 12 + 80);
}
