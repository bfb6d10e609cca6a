// The ring's chunking and its step-by-step trace.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <regex>
#include <sstream>

#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

TEST_CASE("ring_chunk: N chunks cover the tensor, sizes differ by at most one", "[dist]") {
  for (int ranks = 1; ranks <= 8; ++ranks)
    for (int64_t n : {0, 1, 2, 7, 8, 9, 1000, 1001}) {
      int64_t end = 0, lo = n, hi = 0;
      for (int c = 0; c < ranks; ++c) {
        const RingChunk k = ring_chunk(n, ranks, c);
        CHECK(k.begin == end);
        end = k.end;
        lo = std::min(lo, k.end - k.begin);
        hi = std::max(hi, k.end - k.begin);
      }
      CHECK(end == n);
      CHECK(hi - lo <= 1);
    }
}

namespace {

struct Step {
  int step, total, send_chunk, recv_chunk, to, from;
  std::string phase;
  int64_t send_begin, send_end, recv_begin, recv_end;
};

std::vector<Step> parse_trace(const std::string& text, const std::string& name, int rank,
                              int ranks) {
  const std::regex line(name +
                        R"( #(\d+) rank (\d+)/(\d+) step (\d+)/(\d+) ([a-z-]+): send chunk (\d+) )"
                        R"(\[(\d+), (\d+)\) to rank (\d+), recv chunk (\d+) \[(\d+), (\d+)\) )"
                        R"(from rank (\d+), (reduce|copy))");
  std::vector<Step> steps;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) FAIL("unparsed trace line: " << l);
    if (std::stoi(m[2]) != rank || std::stoi(m[3]) != ranks) FAIL("wrong rank in: " << l);
    steps.push_back({std::stoi(m[4]), std::stoi(m[5]), std::stoi(m[7]), std::stoi(m[11]),
                     std::stoi(m[10]), std::stoi(m[14]), m[6], std::stoll(m[8]), std::stoll(m[9]),
                     std::stoll(m[12]), std::stoll(m[13])});
  }
  return steps;
}

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

}  // namespace

TEST_CASE("ring trace: 2(N-1) steps per rank with the chunks each rank sends and receives",
          "[dist]") {
  for (int ranks = 1; ranks <= 6; ++ranks) {
    const int64_t n = 10;  // uneven chunks for most N
    std::vector<std::ostringstream> trace(ranks);
    std::vector<Tensor> t;
    for (int r = 0; r < ranks; ++r) t.push_back(make_input(r, n, DType::f32));
    run_ranks(ranks, [&](Communicator& c) {
      ring_allreduce(c, t[c.rank()], ReduceOp::sum, {.trace = &trace[c.rank()]});
    });
    for (int r = 0; r < ranks; ++r) {
      INFO("N=" << ranks << " rank " << r << "\n" << trace[r].str());
      const std::vector<Step> steps = parse_trace(trace[r].str(), "ring_allreduce", r, ranks);
      REQUIRE(steps.size() == static_cast<size_t>(2 * (ranks - 1)));
      for (int s = 0; s < 2 * (ranks - 1); ++s) {
        const Step& st = steps[s];
        const bool rs = s < ranks - 1;
        const int k = rs ? s : s - (ranks - 1);
        CHECK(st.step == s + 1);
        CHECK(st.total == 2 * (ranks - 1));
        CHECK(st.phase == (rs ? "reduce-scatter" : "allgather"));
        // Reduce-scatter ends with rank r owning chunk r; the allgather passes it on.
        CHECK(st.send_chunk == (rs ? mod(r - k - 1, ranks) : mod(r - k, ranks)));
        CHECK(st.recv_chunk == (rs ? mod(r - k - 2, ranks) : mod(r - k - 1, ranks)));
        CHECK(st.to == mod(r + 1, ranks));
        CHECK(st.from == mod(r - 1, ranks));
        const RingChunk sc = ring_chunk(n, ranks, st.send_chunk),
                        rc = ring_chunk(n, ranks, st.recv_chunk);
        CHECK((st.send_begin == sc.begin && st.send_end == sc.end));
        CHECK((st.recv_begin == rc.begin && st.recv_end == rc.end));
      }
    }
  }
}

TEST_CASE("ring trace: reduce_scatter and allgather alone take N-1 steps", "[dist]") {
  const int ranks = 4;
  std::vector<std::ostringstream> rs(ranks), ag(ranks);
  run_ranks(ranks, [&](Communicator& c) {
    Tensor in = ones({8}), out = empty({2}), all = empty({8});
    ring_reduce_scatter(c, in, out, ReduceOp::sum, {.trace = &rs[c.rank()]});
    ring_allgather(c, out, all, {.trace = &ag[c.rank()]});
  });
  for (int r = 0; r < ranks; ++r) {
    // Sequence numbers count every collective on the communicator: #0, then #1.
    const auto a = parse_trace(rs[r].str(), "ring_reduce_scatter", r, ranks);
    const auto b = parse_trace(ag[r].str(), "ring_allgather", r, ranks);
    CHECK(a.size() == 3);
    CHECK(b.size() == 3);
    CHECK_THAT(rs[r].str(), Catch::Matchers::StartsWith("ring_reduce_scatter #0 "));
    CHECK_THAT(ag[r].str(), Catch::Matchers::StartsWith("ring_allgather #1 "));
    for (const Step& s : a) CHECK(s.phase == "reduce-scatter");
    for (const Step& s : b) CHECK(s.phase == "allgather");
  }
}

TEST_CASE("ring trace: STOKE_RING_TRACE=1 prints the steps on stderr", "[dist]") {
  // Set before the rank threads start and cleared after they end: no thread reads the
  // environment while it changes.
  std::ostringstream captured;
  std::streambuf* saved = std::cerr.rdbuf(captured.rdbuf());
  ::setenv("STOKE_RING_TRACE", "1", 1);
  run_ranks(3, [](Communicator& c) {
    Tensor t = ones({5});
    ring_allreduce(c, t);
  });
  ::unsetenv("STOKE_RING_TRACE");
  std::cerr.rdbuf(saved);
  int lines = 0;
  std::istringstream in(captured.str());
  for (std::string l; std::getline(in, l);) lines += l.starts_with("ring_allreduce #0 rank ");
  CHECK(lines == 3 * 2 * 2);  // 3 ranks, 2(N-1) = 4 steps each
}
