// The tuner (dist/tuner.h): its cost formulas against the textbook's closed forms on a model of
// chosen parameters, its choices and their ranges, and its calibration over the in-process engine
// (every rank the same model, cached, no messages the second time), and the collectives by
// algorithm, automatic included, against the f64 reference.
#include <catch2/catch.hpp>

#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

// alpha 10 us per step, beta 1 ns per byte (1 GB/s), gamma 0.5 ns per byte; native 20 us + 2 ns/B.
// A made-up machine: these are the model's inputs, not tolerances; the tests derive each
// expected choice from them in closed form.
AllreduceModel model_of(int ranks) {
  AllreduceModel m;
  m.ranks = ranks;
  m.segment_bytes = int64_t{1} << 20;
  m.exchange = CostCurve::line(10e-6, 1e-9);
  m.oneway = CostCurve::line(10e-6, 1e-9);
  m.reduce = CostCurve::line(0, 0.5e-9);
  m.native_allreduce = CostCurve::line(20e-6, 2e-9);
  m.native_reduce_scatter = CostCurve::line(15e-6, 1.5e-9);
  m.native_allgather = CostCurve::line(12e-6, 1.2e-9);
  return m;
}

}  // namespace

TEST_CASE("dist tuner: the model's times are the alpha-beta closed forms", "[dist]") {
  const double a = 10e-6, b = 1e-9, g = 0.5e-9;
  const double n = 4096;  // one segment everywhere
  const auto close = [](double x, double y) { return Approx(y).epsilon(1e-12) == x; };
  // N = 4: ring 2(N-1) steps, 2(N-1)/N n sent, (N-1)/N n reduced; tree 2 log2 N levels of the
  // whole tensor, log2 N of reduces; rhd 2 log2 N steps with the ring's bytes.
  AllreduceModel m = model_of(4);
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::ring, 4096),
              6 * a + 1.5 * n * b + 0.75 * n * g));
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::tree, 4096), 4 * a + 4 * n * b + 2 * n * g));
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::rhd, 4096),
              4 * a + 1.5 * n * b + 0.75 * n * g));
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::native, 4096), 20e-6 + n * 2e-9));
  // N = 5: the tree has ceil(log2 5) = 3 levels; rhd folds to 4 ranks, + 2 (alpha + n beta) + n g.
  m = model_of(5);
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::tree, 4096), 6 * a + 6 * n * b + 3 * n * g));
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::rhd, 4096),
              4 * a + 1.5 * n * b + 0.75 * n * g + 2 * (a + n * b) + n * g));
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::ring, 4096),
              8 * a + 1.6 * n * b + 0.8 * n * g));
  // The tree's and the fold's steps go one way: P, not X.
  m.oneway = CostCurve::line(4e-6, 1e-9);
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::tree, 4096),
              6 * 4e-6 + 6 * n * b + 3 * n * g));
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::rhd, 4096),
              4 * a + 1.5 * n * b + 0.75 * n * g + 2 * (4e-6 + n * b) + n * g));
  // Segments of 1 MiB: a ring step of 4 MiB at N = 2 is 4 messages.
  m = model_of(2);
  const double big = 8 << 20;
  CHECK(close(predict_allreduce(m, AllreduceAlgorithm::ring, 8 << 20),
              2 * 4 * a + big * b + 0.5 * big * g));
  // Reduce-scatter and allgather at N = 4: the ring's half of each; a tree has none.
  m = model_of(4);
  CHECK(
      close(predict_reduce_scatter(m, AllreduceAlgorithm::ring, 4096), 3 * a + 0.75 * n * (b + g)));
  CHECK(close(predict_allgather(m, AllreduceAlgorithm::rhd, 4096), 2 * a + 0.75 * n * b));
  CHECK(predict_reduce_scatter(m, AllreduceAlgorithm::tree, 4096) == INFINITY);
  // One rank: stoke's algorithms send nothing.
  CHECK(predict_allreduce(model_of(1), AllreduceAlgorithm::ring, 4096) == 0);
}

TEST_CASE("dist tuner: choices follow the model: latency-bound small, bandwidth-bound large",
          "[dist]") {
  AllreduceModel m = model_of(8);
  m.native_allreduce = CostCurve::line(100e-6, 10e-9);  // out of the running
  // 8 B at N = 8: the tree and rhd take 2 log2 8 = 6 steps, the ring 14; rhd sends fewer bytes
  // than the tree (which moves the whole tensor at every level), so it wins the tie of latencies.
  CHECK(predict_allreduce(m, AllreduceAlgorithm::tree, 8) <
        predict_allreduce(m, AllreduceAlgorithm::ring, 8));
  CHECK(choose_allreduce(m, 8) == AllreduceAlgorithm::rhd);
  // 64 MiB: in whole segments rhd's steps send as many messages as the ring's (2(N-1)/N n bytes
  // either way): the two tie.
  CHECK(predict_allreduce(m, AllreduceAlgorithm::rhd, 64 << 20) ==
        Approx(predict_allreduce(m, AllreduceAlgorithm::ring, 64 << 20)).epsilon(1e-12));
  // At N = 3 the fold costs rhd 2 more steps: 4 against the ring's 4, and the ring sends fewer
  // bytes (2(N-1)/N n against n + 2n).
  m.ranks = 3;
  CHECK(choose_allreduce(m, 64 << 20) == AllreduceAlgorithm::ring);
  // A native collective cheaper than everything is chosen.
  m.native_allreduce = CostCurve::line(1e-6, 0.1e-9);
  m.native_reduce_scatter = CostCurve::line(1e-6, 0.1e-9);
  CHECK(choose_allreduce(m, 8) == AllreduceAlgorithm::native);
  CHECK(choose_allreduce(m, 64 << 20) == AllreduceAlgorithm::native);
  CHECK(choose_reduce_scatter(m, 64 << 20) == AllreduceAlgorithm::native);
  CHECK(choose_allgather(m, 64 << 20) != AllreduceAlgorithm::native);  // native's: 1.2 ns/B
  // The ranges agree with choose_allreduce on both sides of every boundary.
  m = model_of(6);
  const auto ranges = allreduce_choices(m, int64_t{1} << 30);
  REQUIRE(!ranges.empty());
  CHECK(ranges.front().first == 1);
  for (size_t i = 0; i < ranges.size(); ++i) {
    CHECK(choose_allreduce(m, ranges[i].first) == ranges[i].second);
    if (i > 0) CHECK(choose_allreduce(m, ranges[i].first - 1) == ranges[i - 1].second);
  }
  CHECK(describe(m).find("auto allreduce: ") != std::string::npos);
}

TEST_CASE("dist tuner: the calibration's choice table gives the model's cheapest at every size",
          "[dist]") {
  // The reference: the smallest of the four predictions (ties to the earlier of native, ring,
  // tree, rhd), taken here directly, not through choose_allreduce.
  const auto cheapest = [](const AllreduceModel& m, int64_t b) {
    AllreduceAlgorithm best = AllreduceAlgorithm::native;
    for (AllreduceAlgorithm a : {AllreduceAlgorithm::native, AllreduceAlgorithm::ring,
                                 AllreduceAlgorithm::tree, AllreduceAlgorithm::rhd})
      if (predict_allreduce(m, a, b) < predict_allreduce(m, best, b)) best = a;
    return best;
  };
  for (int ranks : {2, 3, 6}) {
    INFO("ranks " << ranks);
    AllreduceModel m = model_of(ranks);
    m.native_allreduce = CostCurve::line(3e-6, 0.4e-9);  // cheapest at small sizes only
    m.allreduce_table = allreduce_choices(m, int64_t{1} << 30);
    REQUIRE(!m.allreduce_table.empty());
    std::vector<int64_t> sizes;
    for (int64_t b = 1; b <= (int64_t{1} << 30); b *= 2) sizes.insert(sizes.end(), {b, 3 * b / 2});
    for (const auto& [first, a] : m.allreduce_table)
      sizes.insert(sizes.end(), {first - 1, first, first + 1});
    for (int64_t b : sizes) {
      if (b < 1) continue;
      INFO("bytes " << b);
      CHECK(choose_allreduce(m, b) == cheapest(m, b));
    }
    // Past the table (1 GiB): predicted, as without one.
    CHECK(choose_allreduce(m, int64_t{4} << 30) == cheapest(m, int64_t{4} << 30));
  }
}

TEST_CASE(
    "dist tuner: an algorithm's measured curve, where there is one, decides over the formulas",
    "[dist]") {
  AllreduceModel m = model_of(4);
  m.native_allreduce = CostCurve::line(100e-6, 10e-9);
  CHECK(choose_allreduce(m, 1 << 20) != AllreduceAlgorithm::native);
  // Measured: native 1 us + 0.1 ns/B, rhd 2 us flat; the ring and the tree not measured.
  m.measured_allreduce[AllreduceAlgorithm::native] = CostCurve::line(1e-6, 0.1e-9);
  m.measured_allreduce[AllreduceAlgorithm::rhd] = CostCurve{{{8, 2e-6}, {1 << 30, 2e-6}}};
  CHECK(predict_allreduce(m, AllreduceAlgorithm::native, 1000) == Approx(1.1e-6));
  CHECK(predict_allreduce(m, AllreduceAlgorithm::ring, 1000) ==
        textbook_allreduce(m, AllreduceAlgorithm::ring, 1000));
  CHECK(choose_allreduce(m, 1000) == AllreduceAlgorithm::native);
  CHECK(choose_allreduce(m, 1 << 20) == AllreduceAlgorithm::rhd);  // native: 1 + 105 us
  // A measured curve for the reduce-scatter is its own.
  m.measured_reduce_scatter[AllreduceAlgorithm::ring] = CostCurve::line(0.5e-6, 0);
  CHECK(choose_reduce_scatter(m, 1 << 20) == AllreduceAlgorithm::ring);
}

TEST_CASE("dist tuner: cost curves are linear between their points, extended past them", "[dist]") {
  const CostCurve c{{{8, 2e-6}, {1024, 4e-6}, {4096, 10e-6}}};
  CHECK(c.at(8) == Approx(2e-6));
  CHECK(c.at(516) == Approx(3e-6));                         // halfway through the first range
  CHECK(c.at(2560) == Approx(7e-6));                        // halfway through the second
  CHECK(c.at(8192) == Approx(10e-6 + 4096 * 6e-6 / 3072));  // the last range's slope, extended
  CHECK(c.at(0) == Approx(2e-6 - 8 * 2e-6 / 1016));         // and the first's, backwards
  CHECK(c.alpha_s() == 2e-6);
  CHECK(c.beta_s() == Approx(6e-6 / 3072));
  CHECK(CostCurve::line(1e-6, 1e-9).at(1e6) == Approx(1e-6 + 1e-3));
  CHECK(CostCurve{}.at(100) == 0);
}

TEST_CASE("dist tuner: algorithm names", "[dist]") {
  for (AllreduceAlgorithm a :
       {AllreduceAlgorithm::native, AllreduceAlgorithm::ring, AllreduceAlgorithm::tree,
        AllreduceAlgorithm::rhd, AllreduceAlgorithm::automatic})
    CHECK(parse_allreduce_algorithm(allreduce_algorithm_name(a), "x") == a);
  CHECK(std::string(allreduce_algorithm_name(AllreduceAlgorithm::automatic)) == "auto");
  CHECK_THROWS_WITH(
      parse_allreduce_algorithm("butterfly", "--allreduce"),
      Catch::Contains(
          "--allreduce: expected 'native', 'ring', 'tree', 'rhd' or 'auto', got 'butterfly'"));
}

TEST_CASE("dist tuner: calibration gives every rank the same model, cached without messages",
          "[dist]") {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    std::vector<AllreduceModel> models(ranks);
    std::vector<int64_t> second_call_messages(ranks, -1);
    std::vector<char> same_object(ranks);  // not vector<bool>: its bits share words across ranks
    run_ranks(ranks, [&](Communicator& c) {
      const CalibrationOptions o{.large_bytes = 64 << 10, .reps = 3};  // 8 B, 4 KiB, 64 KiB
      const auto m = allreduce_model(c, Device::cpu(), o);
      models[c.rank()] = *m;
      const int64_t before = c.p2p_sent().messages;
      const auto again = allreduce_model(c, Device::cpu(), o);
      second_call_messages[c.rank()] = c.p2p_sent().messages - before;
      same_object[c.rank()] = again == m && c.cached_allreduce_model() == m;
    });
    INFO("N=" << ranks);
    for (int r = 0; r < ranks; ++r) {
      CHECK(second_call_messages[r] == 0);
      CHECK(same_object[r]);
      // Bit-identical figures: each is the largest over ranks of the same allreduce(max).
      const AllreduceModel& a = models[r];
      const AllreduceModel& b = models[0];
      CHECK(a.ranks == ranks);
      CHECK(a.exchange.points == b.exchange.points);
      CHECK(a.oneway.points == b.oneway.points);
      CHECK(a.reduce.points == b.reduce.points);
      CHECK(a.native_allreduce.points == b.native_allreduce.points);
      CHECK(a.native_reduce_scatter.points == b.native_reduce_scatter.points);
      CHECK(a.native_allgather.points == b.native_allgather.points);
      for (AllreduceAlgorithm k : {AllreduceAlgorithm::native, AllreduceAlgorithm::ring,
                                   AllreduceAlgorithm::tree, AllreduceAlgorithm::rhd}) {
        REQUIRE(a.measured_allreduce.count(k) == 1);
        CHECK(a.measured_allreduce.at(k).points == b.measured_allreduce.at(k).points);
      }
      CHECK(a.measured_reduce_scatter.empty());  // not asked for
    }
    // Sizes 8 B, 4 KiB and 64 KiB (the large size), each cost at least the one before.
    const AllreduceModel& m = models[0];
    REQUIRE(m.exchange.points.size() == 3);
    CHECK(m.exchange.points[0].first == 8);
    CHECK(m.exchange.points[2].first == 64 << 10);
    for (const CostCurve* c : {&m.exchange, &m.oneway, &m.reduce, &m.native_allreduce})
      for (size_t i = 1; i < c->points.size(); ++i)
        CHECK(c->points[i].second >= c->points[i - 1].second);
    CHECK(m.reduce.points.back().second > 0);
    if (ranks > 1) CHECK(m.exchange.points.back().second > 0);
  }
}

TEST_CASE("dist tuner: allreduce, reduce_scatter and allgather by algorithm, auto included",
          "[dist]") {
  const std::vector<AllreduceAlgorithm> all = {AllreduceAlgorithm::native, AllreduceAlgorithm::ring,
                                               AllreduceAlgorithm::tree, AllreduceAlgorithm::rhd,
                                               AllreduceAlgorithm::automatic};
  for (int ranks : {1, 3, 4})
    for (int64_t n : {0, 5, 3000}) {
      std::vector<std::vector<Tensor>> t(all.size());
      std::vector<std::vector<double>> in;
      for (int r = 0; r < ranks; ++r)
        in.push_back(make_input(r, n * ranks, DType::f32).to_vector<double>());
      for (size_t k = 0; k < all.size(); ++k)
        for (int r = 0; r < ranks; ++r) t[k].push_back(make_input(r, n * ranks, DType::f32));
      // Sized here: the rank threads only write their own elements.
      std::vector<std::vector<Tensor>> scattered(all.size(), std::vector<Tensor>(ranks)),
          gathered(all.size(), std::vector<Tensor>(ranks));
      run_ranks(ranks, [&](Communicator& c) {
        const int r = c.rank();
        // A small calibration first (8 B to 64 KiB), which auto then finds cached: the default one
        // times every candidate up to 16 MiB, minutes under TSan.
        allreduce_model(c, Device::cpu(),
                        {.large_bytes = 64 << 10, .reps = 3, .scatter_gather = true});
        for (size_t k = 0; k < all.size(); ++k) {
          allreduce(c, t[k][r], ReduceOp::avg, all[k]);
          if (all[k] == AllreduceAlgorithm::tree) continue;
          Tensor out = empty({n});
          reduce_scatter(c, make_input(r, n * ranks, DType::f32), out, ReduceOp::sum, all[k]);
          Tensor g = empty({n * ranks});
          allgather(c, make_input(r, n, DType::f32), g, all[k]);
          scattered[k][r] = out;
          gathered[k][r] = g;
        }
      });
      const Reference avg = reduce_reference(in, ReduceOp::avg, DType::f32);
      const Reference sum = reduce_reference(in, ReduceOp::sum, DType::f32);
      for (size_t k = 0; k < all.size(); ++k)
        for (int r = 0; r < ranks; ++r) {
          INFO(allreduce_algorithm_name(all[k]) << " N=" << ranks << " n=" << n << " rank " << r);
          CHECK(check_close(t[k][r].to_vector<double>(), avg) == "");
          if (all[k] == AllreduceAlgorithm::tree) continue;
          CHECK(check_close(scattered[k][r].to_vector<double>(), sum, r * n) == "");
          for (int q = 0; q < ranks; ++q)
            CHECK(same_bytes(gathered[k][r].narrow(0, q * n, n).contiguous(),
                             make_input(q, n, DType::f32)));
        }
    }
  CHECK_THROWS_WITH(run_ranks(2,
                              [](Communicator& c) {
                                Tensor out = empty({2});
                                reduce_scatter(c, zeros({4}), out, ReduceOp::sum,
                                               AllreduceAlgorithm::tree);
                              }),
                    Catch::Contains("a tree has no reduce-scatter form"));
}
