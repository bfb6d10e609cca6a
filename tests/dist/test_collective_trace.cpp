// The traces of stoke's collectives (dist/collective_options.h): the timed events of the ring, the
// tree and halving-doubling, checked for what any correct run must show whatever the timing: every
// send received by its peer with the same range and step, every reduce after its receive, no
// receive finished before its send was posted; the text trace of the tree and rhd; and both
// environment switches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <tuple>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

struct Event {
  std::string coll, phase, kind;
  int64_t seq;
  int rank, ranks, step, peer;
  int64_t begin, end, bytes, t0, t1;
};

std::vector<Event> parse(const std::string& text) {
  std::vector<Event> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out.push_back({j.at("coll"), j.at("phase"), j.at("kind"), j.at("seq"), j.at("rank"),
                   j.at("ranks"), j.at("step"), j.at("peer"), j.at("begin"), j.at("end"),
                   j.at("bytes"), j.at("t0_ns"), j.at("t1_ns")});
  }
  return out;
}

using Run = std::function<void(Communicator&, Tensor&, const CollectiveOptions&)>;

// The events of one allreduce of n f32 elements over `ranks` ranks, all ranks together.
std::vector<Event> trace_of(const Run& run, int ranks, int64_t n, CollectiveOptions o) {
  std::vector<std::ostringstream> streams(static_cast<size_t>(ranks));
  run_ranks(ranks, [&](Communicator& c) {
    Tensor t = make_input(c.rank(), n, DType::f32);
    CollectiveOptions mine = o;
    mine.timeline = &streams[static_cast<size_t>(c.rank())];
    run(c, t, mine);
  });
  std::vector<Event> all;
  for (auto& s : streams)
    for (Event& e : parse(s.str())) all.push_back(e);
  return all;
}

// "" when the events are those of a correct run, else the first thing wrong.
std::string check_events(const std::vector<Event>& ev, const char* coll, int ranks) {
  using Key =
      std::tuple<int, int, int, std::string, int64_t, int64_t>;  // from, to, step, phase, range
  std::map<Key, const Event*> sends;
  std::map<Key, int> unmatched;
  for (const Event& e : ev) {
    if (e.coll != coll) return "coll " + e.coll;
    if (e.ranks != ranks || e.seq != 0) return "ranks or seq";
    if (e.t0 > e.t1) return "an event ends before it starts";
    if (e.bytes != (e.end - e.begin) * 4) return "bytes differ from the range";
    if (e.kind == "send") {
      const Key k{e.rank, e.peer, e.step, e.phase, e.begin, e.end};
      sends[k] = &e;
      ++unmatched[k];
    }
  }
  for (const Event& e : ev) {
    if (e.kind == "recv") {
      const Key k{e.peer, e.rank, e.step, e.phase, e.begin, e.end};
      auto it = sends.find(k);
      if (it == sends.end() || --unmatched[k] < 0)
        return "a receive no send matches: rank " + std::to_string(e.rank) + " from " +
               std::to_string(e.peer) + " step " + std::to_string(e.step) + " " + e.phase;
      if (e.t1 < it->second->t0) return "a receive finished before its send was posted";
    } else if (e.kind == "reduce") {
      const bool after_recv = std::any_of(ev.begin(), ev.end(), [&](const Event& r) {
        return r.kind == "recv" && r.rank == e.rank && r.step == e.step && r.begin == e.begin &&
               r.end == e.end && r.t1 <= e.t0;
      });
      if (!after_recv) return "a reduce without its receive before it";
    } else if (e.kind != "send") {
      return "kind " + e.kind;
    }
  }
  for (const auto& [k, left] : unmatched)
    if (left != 0) return "a send nobody received";
  return "";
}

}  // namespace

TEST_CASE("dist trace: every algorithm's timed events pair sends with receives, reduce after",
          "[dist]") {
  const std::vector<std::pair<const char*, Run>> algos = {
      {"ring_allreduce",
       [](Communicator& c, Tensor& t, const CollectiveOptions& o) {
         ring_allreduce(c, t, ReduceOp::sum, o);
       }},
      {"tree_allreduce",
       [](Communicator& c, Tensor& t, const CollectiveOptions& o) {
         tree_allreduce(c, t, ReduceOp::sum, o);
       }},
      {"rhd_allreduce", [](Communicator& c, Tensor& t, const CollectiveOptions& o) {
         rhd_allreduce(c, t, ReduceOp::sum, o);
       }}};
  for (const auto& [name, run] : algos)
    for (int ranks = 2; ranks <= 5; ++ranks)
      for (bool pipelined : {true, false}) {
        INFO(name << " N=" << ranks << (pipelined ? " pipelined" : " blocking"));
        // 10 elements in segments of 2: uneven chunks, several segments each.
        const auto ev = trace_of(run, ranks, 10, {.segment_bytes = 8, .pipelined = pipelined});
        CHECK(!ev.empty());
        CHECK(check_events(ev, name, ranks) == "");
      }
}

TEST_CASE("dist trace: the pipelined ring posts segment k+1's receive before reducing segment k",
          "[dist]") {
  // 4 ranks, 16 elements: chunks of 4 in segments of 2, so every step has two segments.
  const Run ring = [](Communicator& c, Tensor& t, const CollectiveOptions& o) {
    ring_allreduce(c, t, ReduceOp::sum, o);
  };
  for (bool pipelined : {true, false}) {
    INFO((pipelined ? "pipelined" : "blocking"));
    const auto ev = trace_of(ring, 4, 16, {.segment_bytes = 8, .pipelined = pipelined});
    int reduces = 0, overlapped = 0;
    for (const Event& red : ev) {
      if (red.kind != "reduce" || red.end % 4 == 0) continue;  // a chunk's last: none follows
      ++reduces;
      for (const Event& next : ev)
        if (next.kind == "recv" && next.rank == red.rank && next.step == red.step &&
            next.begin == red.end)
          overlapped += next.t0 < red.t0;  // posted before this reduce started
    }
    CHECK(reduces == 4 * 3);  // 4 ranks x 3 reduce-scatter steps
    CHECK(overlapped == (pipelined ? reduces : 0));
  }
}

TEST_CASE("dist trace: the tree's and rhd's text steps", "[dist]") {
  const int ranks = 5;
  std::vector<std::ostringstream> tree(ranks), rhd(ranks);
  run_ranks(ranks, [&](Communicator& c) {
    Tensor a = ones({10}), b = ones({10});
    tree_allreduce(c, a, ReduceOp::sum, {.trace = &tree[c.rank()]});
    rhd_allreduce(c, b, ReduceOp::sum, {.trace = &rhd[c.rank()]});
  });
  // Tree of 5: 0 -> {1, 2, 4}, 2 -> {3}; ceil(log2 5) = 3 levels each way. A rank prints a line
  // per link per phase: its children's and its parent's.
  const std::vector<int> links = {3, 1, 2, 1, 1};
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r << "\n" << tree[r].str() << rhd[r].str());
    std::istringstream in(tree[r].str());
    int lines = 0;
    for (std::string l; std::getline(in, l); ++lines)
      CHECK_THAT(l, Catch::Matchers::StartsWith("tree_allreduce #0 rank " + std::to_string(r) +
                                                "/5 step "));
    CHECK(lines == 2 * links[r]);
    // rhd over 5: the fold (ranks 0 and 1), 2 halving and 2 doubling steps among 4, the unfold:
    // 6 steps; rank 0 takes part in the fold and unfold only.
    std::istringstream rin(rhd[r].str());
    int rlines = 0;
    for (std::string l; std::getline(rin, l); ++rlines)
      CHECK_THAT(l, Catch::Matchers::StartsWith("rhd_allreduce #1 rank " + std::to_string(r) +
                                                "/5 step "));
    CHECK(rlines == (r == 0 ? 2 : r == 1 ? 6 : 4));
  }
  CHECK_THAT(tree[3].str(),
             Catch::Matchers::Contains("step 1/6 reduce: send [0, 10) to rank 2") &&
                 Catch::Matchers::Contains("step 6/6 broadcast: recv [0, 10) from rank 2, copy"));
  CHECK_THAT(rhd[0].str(),
             Catch::Matchers::Contains("step 1/6 fold: send [0, 10) to rank 1") &&
                 Catch::Matchers::Contains("step 6/6 unfold: recv [0, 10) from rank 1, copy"));
  CHECK_THAT(rhd[1].str(),
             Catch::Matchers::Contains("step 2/6 reduce-scatter: send [6, 10) to rank 3, recv [0, "
                                       "6) from rank 3, reduce"));
}

TEST_CASE("dist trace: STOKE_COLLECTIVE_TRACE=1 and STOKE_COLLECTIVE_TIMELINE=<prefix>", "[dist]") {
  // Set before the rank threads start and cleared after they end: no thread reads the environment
  // while it changes.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("stoke_timeline_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string prefix = (dir / "run").string();
  std::ostringstream captured;
  std::streambuf* saved = std::cerr.rdbuf(captured.rdbuf());
  ::setenv("STOKE_COLLECTIVE_TRACE", "1", 1);
  ::setenv("STOKE_COLLECTIVE_TIMELINE", prefix.c_str(), 1);
  run_ranks(3, [](Communicator& c) {
    Tensor t = ones({5});
    tree_allreduce(c, t);
  });
  ::unsetenv("STOKE_COLLECTIVE_TRACE");
  ::unsetenv("STOKE_COLLECTIVE_TIMELINE");
  std::cerr.rdbuf(saved);
  int lines = 0;
  std::istringstream in(captured.str());
  for (std::string l; std::getline(in, l);) lines += l.starts_with("tree_allreduce #0 rank ");
  CHECK(lines == 2 * 2 * 2);  // links: 0-1 and 0-2, each printed by both ends, in both phases
  std::vector<Event> all;
  for (int r = 0; r < 3; ++r) {
    std::ifstream f(prefix + ".rank" + std::to_string(r) + ".jsonl");
    REQUIRE(f.good());
    std::stringstream s;
    s << f.rdbuf();
    for (Event& e : parse(s.str())) all.push_back(e);
  }
  CHECK(check_events(all, "tree_allreduce", 3) == "");
  std::filesystem::remove_all(dir);
}
