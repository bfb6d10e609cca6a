// Errors name the collective, its sequence number and the ranks; a failing rank aborts the group
// so that no other rank hangs; the watchdog timeout names the rank that did not arrive.
#include <catch2/catch.hpp>

#include <mutex>
#include <regex>
#include <stdexcept>

#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// Runs fn on every rank, records each rank's error message ("" if none), and returns them with
// the message run_ranks rethrew.
struct Outcome {
  std::vector<std::string> rank_error;
  std::string rethrown;
};

Outcome run_and_record(int ranks, const std::function<void(Communicator&)>& fn,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  Outcome o;
  o.rank_error.resize(ranks);
  try {
    run_ranks(ranks,
              [&](Communicator& c) {
                try {
                  fn(c);
                } catch (const std::exception& e) {
                  o.rank_error[c.rank()] = e.what();
                  throw;
                }
              },
              {.timeout = timeout});
  } catch (const std::exception& e) {
    o.rethrown = e.what();
  }
  return o;
}

}  // namespace

TEST_CASE("allreduce: mismatched lengths fail on every rank naming the collective and ranks",
          "[dist]") {
  const Outcome o = run_and_record(3, [](Communicator& c) {
    Tensor ok = ones({4});
    c.allreduce(ok);  // #0
    c.allreduce(ok);  // #1
    Tensor t = ones({c.rank() == 1 ? 999 : 1000});
    c.allreduce(t);  // #2
  });
  CHECK(o.rethrown == "stoke::allreduce #2: rank 1 has 999 elements, rank 0 has 1000");
  CHECK_THAT(o.rank_error[1], StartsWith("stoke::allreduce #2: aborted because rank 0 failed: "
                                         "stoke::allreduce #2: rank 1 has 999 elements"));
  CHECK_THAT(o.rank_error[2], StartsWith("stoke::allreduce #2: aborted because rank 0 failed"));
}

TEST_CASE("ring allreduce: mismatched lengths fail with the elements expected and sent", "[dist]") {
  for (int ranks : {2, 3, 4}) {
    const Outcome o = run_and_record(ranks, [](Communicator& c) {
      Tensor t = ones({c.rank() == 1 ? 999 : 1000});
      ring_allreduce(c, t);
    });
    INFO("N=" << ranks << ": " << o.rethrown);
    CHECK_THAT(o.rethrown, StartsWith("stoke::ring_allreduce #0: rank "));
    CHECK_THAT(o.rethrown,
               Contains(" expected ") && Contains(" elements, rank ") && Contains(" sent "));
  }
}

TEST_CASE("collectives: mismatched dtype, reduce op, root or collective are named", "[dist]") {
  CHECK(run_and_record(2, [](Communicator& c) {
          Tensor t = ones({3}, {.dtype = c.rank() ? DType::f64 : DType::f32});
          c.allreduce(t);
        }).rethrown == "stoke::allreduce #0: rank 1 has dtype f64, rank 0 has f32");
  CHECK_THAT(run_and_record(2,
                            [](Communicator& c) {
                              Tensor t = ones({3});
                              c.allreduce(t, c.rank() ? ReduceOp::max : ReduceOp::sum);
                            })
                 .rethrown,
             StartsWith("stoke::allreduce #0: rank 1 passed 2, rank 0 passed 0"));
  CHECK_THAT(run_and_record(2,
                            [](Communicator& c) {
                              Tensor t = ones({3});
                              if (c.rank())
                                c.broadcast(t, 0);
                              else
                                c.allreduce(t);
                            })
                 .rethrown,
             StartsWith("stoke::allreduce #0: rank 1 called broadcast #0 while rank 0 called "
                        "allreduce #0"));
  CHECK(run_and_record(2, [](Communicator& c) {
          if (c.rank() == 0) c.send(ones({3}), 1);
          if (c.rank() == 1) {
            Tensor t = empty({4});
            c.recv(t, 0);
          }
        }).rethrown == "stoke::recv: rank 1 expected 4 elements, rank 0 sent 3");
}

TEST_CASE("collectives: a rank that throws aborts the others, which name the collective",
          "[dist]") {
  for (bool ring : {false, true}) {
    const Outcome o = run_and_record(4, [ring](Communicator& c) {
      Tensor t = ones({1000});
      if (c.rank() == 2) throw std::runtime_error("boom");
      if (ring)
        ring_allreduce(c, t);
      else
        c.allreduce(t);
    });
    INFO((ring ? "ring" : "native"));
    CHECK(o.rethrown == "boom");
    const std::string name = ring ? "ring_allreduce" : "allreduce";
    for (int r : {0, 1, 3})
      CHECK(o.rank_error[r] == "stoke::" + name + " #0: aborted because rank 2 failed: boom");
  }
}

TEST_CASE("collectives: a rank that never arrives trips the timeout, naming it", "[dist]") {
  const Outcome o = run_and_record(
      3,
      [](Communicator& c) {
        if (c.rank() == 1) return;  // stalls: never calls the allreduce
        Tensor t = ones({8});
        c.allreduce(t);
      },
      std::chrono::milliseconds(200));
  // Rank 0 (waiting for rank 1) or rank 2 (waiting for rank 0's result) times out first; both
  // name rank 1, and the other is aborted.
  for (const std::string& e : {o.rethrown, o.rank_error[0], o.rank_error[2]}) {
    INFO(e);
    CHECK(std::regex_search(e, std::regex("^stoke::allreduce #0: (aborted because rank [02] "
                                          "failed: stoke::allreduce #0: )?rank [02] timed out "
                                          "after 0.2 s: rank 1 did not arrive$")));
  }
  for (bool ring : {false, true}) {
    const Outcome r = run_and_record(
        4,
        [ring](Communicator& c) {
          Tensor t = ones({8});
          c.allreduce(t);  // #0: everyone
          if (c.rank() == 3) return;
          if (ring)
            ring_allreduce(c, t);
          else
            c.allreduce(t);
        },
        std::chrono::milliseconds(200));
    INFO(r.rethrown);
    CHECK(std::regex_search(r.rethrown, std::regex(std::string("^stoke::") + (ring ? "ring_" : "") +
                                                   "allreduce #1: rank [012] timed out after 0.2 "
                                                   "s: rank 3 did not arrive$")));
  }
}

TEST_CASE("collectives: non-contiguous and wrongly sized tensors are refused on the calling rank",
          "[dist]") {
  run_ranks(1, [](Communicator& c) {
    Tensor m = zeros({3, 4});
    Tensor t = m.t();
    bool threw = false;
    try {
      c.allreduce(t);
    } catch (const Error& e) {
      threw =
          std::string(e.what()).starts_with("stoke::allreduce #0: the tensor must be contiguous");
    }
    if (!threw) throw std::runtime_error("a transposed tensor was accepted");
    Tensor in = zeros({5}), out = zeros({2});
    try {
      c.reduce_scatter(in, out);
      threw = false;
    } catch (const Error& e) {
      threw = std::string(e.what()).find("the input must have 1 x 2 elements") != std::string::npos;
    }
    if (!threw) throw std::runtime_error("a wrongly sized reduce_scatter was accepted");
  });
}

TEST_CASE("non-blocking: work handles complete in issue order and wait() rethrows", "[dist]") {
  const int ranks = 4;
  std::vector<std::vector<Tensor>> t(ranks);
  for (int r = 0; r < ranks; ++r)
    for (int k = 0; k < 5; ++k) t[r].push_back(make_input(r, 100 + k, DType::f32));
  std::vector<std::vector<double>> first_in;
  for (int r = 0; r < ranks; ++r) first_in.push_back(t[r][0].to_vector<double>());
  const Reference ref0 = reduce_reference(first_in, ReduceOp::sum, DType::f32);
  std::vector<int> completed(ranks, 0);
  run_ranks(ranks, [&](Communicator& c) {
    const int r = c.rank();
    std::vector<Work> work;
    work.push_back(c.allreduce_async(t[r][0]));
    work.push_back(c.broadcast_async(t[r][1], 3));
    work.push_back(c.barrier_async());
    work.push_back(c.run_async([&c, &t, r] { ring_allreduce(c, t[r][2], ReduceOp::avg); }));
    c.allreduce(t[r][3]);  // blocking, queued behind the pending work
    work.push_back(c.allreduce_async(t[r][4], ReduceOp::max));
    for (Work& w : work) w.wait();
    for (Work& w : work) completed[r] += w.is_completed();
  });
  for (int r = 0; r < ranks; ++r) {
    CHECK(completed[r] == 5);
    CHECK(check_close(t[r][0].to_vector<double>(), ref0) == "");
    CHECK(same_bytes(t[r][1], make_input(3, 101, DType::f32)));
    for (int k : {2, 3, 4}) CHECK(same_bytes(t[r][k], t[0][k]));
  }
  // An error in non-blocking work comes out of wait(), naming the collective.
  const Outcome o = run_and_record(2, [](Communicator& c) {
    Tensor t = ones({c.rank() ? 5 : 6});
    Work w = c.allreduce_async(t);
    w.wait();
  });
  CHECK(o.rethrown == "stoke::allreduce #0: rank 1 has 5 elements, rank 0 has 6");
}
