// stoke-bench-allreduce's tuner report (bench/allreduce.h): the measured rows against the tuner's
// calibrated model (dist/tuner.h). Everything here is arithmetic on the rows and the model; the
// only figures are measured ones, or the model's, labelled PREDICTED.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/allreduce.h"
#include "bench/bench_util.h"
#include "core/error.h"

namespace stoke::bench {

namespace {

using dist::AllreduceAlgorithm;

constexpr const char* kCandidates[] = {"native", "ring", "tree", "rhd"};

std::string size_text(int64_t b) {
  if (b >= (int64_t{1} << 20) && b % (int64_t{1} << 20) == 0)
    return detail::str_cat(b >> 20, " MiB");
  if (b >= 1024 && b % 1024 == 0) return detail::str_cat(b >> 10, " KiB");
  return detail::str_cat(b, " B");
}

// The rows by algorithm and size.
using RowIndex = std::map<std::string, std::map<int64_t, const AllreduceRow*>>;

RowIndex index(const std::vector<AllreduceRow>& rows) {
  RowIndex t;
  for (const AllreduceRow& r : rows) t[r.algo][r.bytes] = &r;
  return t;
}

const AllreduceRow* find(const RowIndex& t, const std::string& algo, int64_t bytes) {
  auto a = t.find(algo);
  if (a == t.end()) return nullptr;
  auto b = a->second.find(bytes);
  return b == a->second.end() ? nullptr : b->second;
}

std::vector<int64_t> sizes_of(const std::vector<AllreduceRow>& rows) {
  std::vector<int64_t> s;
  for (const AllreduceRow& r : rows)
    if (std::find(s.begin(), s.end(), r.bytes) == s.end()) s.push_back(r.bytes);
  std::sort(s.begin(), s.end());
  return s;
}

AllreduceAlgorithm algo_of(const std::string& name) {
  return dist::parse_allreduce_algorithm(name, "stoke-bench-allreduce");
}

// Where the model says a and b cost the same, between lo and hi bytes (a geometric scan, then
// bisection to the byte); nullopt when the faster does not change there.
using Predict = double (*)(const dist::AllreduceModel&, AllreduceAlgorithm, int64_t);

std::optional<int64_t> predicted_crossover(const dist::AllreduceModel& m, Predict predict,
                                           AllreduceAlgorithm a, AllreduceAlgorithm b, int64_t lo,
                                           int64_t hi) {
  auto diff = [&](int64_t n) { return predict(m, a, n) - predict(m, b, n); };
  int64_t prev = lo;
  for (int64_t n = lo * 2; prev < hi; n = std::min(hi, n * 2)) {
    if ((diff(prev) < 0) != (diff(n) < 0)) {
      int64_t x = prev, y = n;
      while (y - x > 1) {
        const int64_t mid = x + (y - x) / 2;
        ((diff(mid) < 0) == (diff(x) < 0) ? x : y) = mid;
      }
      return y;
    }
    prev = n;
  }
  return std::nullopt;
}

}  // namespace

std::string model_json(const dist::AllreduceModel& m) {
  std::vector<std::string> choices;
  for (const auto& [from, algo] : dist::allreduce_choices(m, int64_t{1} << 30))
    choices.push_back(JsonObject()
                          .raw("from_bytes", std::to_string(from))
                          .add("algo", dist::allreduce_algorithm_name(algo))
                          .str());
  auto curve = [](const dist::CostCurve& c) {
    std::vector<std::string> pts;
    for (const auto& [bytes, seconds] : c.points)
      pts.push_back(JsonObject()
                        .raw("bytes", std::to_string(static_cast<int64_t>(bytes)))
                        .add("us", seconds * 1e6)
                        .str());
    return json_array(pts);
  };
  return JsonObject()
      .add("source", "measured (calibration)")
      .add("ranks", m.ranks)
      .add("alpha_us", m.exchange.alpha_s() * 1e6)
      .add("beta_ns_per_byte", m.exchange.beta_s() * 1e9)
      .add("gamma_ns_per_byte", m.reduce.beta_s() * 1e9)
      .raw("exchange", curve(m.exchange))
      .raw("oneway", curve(m.oneway))
      .raw("reduce", curve(m.reduce))
      .raw("native_allreduce", curve(m.native_allreduce))
      .raw("native_reduce_scatter", curve(m.native_reduce_scatter))
      .raw("native_allgather", curve(m.native_allgather))
      .raw("measured_allreduce",
           [&] {
             JsonObject o;
             for (const auto& [a, c] : m.measured_allreduce)
               o.raw(dist::allreduce_algorithm_name(a), curve(c));
             return o.str();
           }())
      .raw("segment_bytes", std::to_string(m.segment_bytes))
      .add("calibration_ms", m.calibration_s * 1e3)
      .raw("auto_choices", json_array(choices))
      .str();
}

std::string print_tuner_report(std::ostream& os, const std::vector<AllreduceRow>& rows,
                               const dist::AllreduceModel& model, int ranks) {
  const RowIndex t = index(rows);
  const std::vector<int64_t> sizes = sizes_of(rows);
  JsonObject out;
  out.raw("model", model_json(model));

  // --- auto against the best and against native, size by size.
  std::vector<std::string> auto_json, misses;
  if (t.count("auto")) {
    std::vector<std::vector<std::string>> table;
    double worst_best = INFINITY, worst_native = INFINITY;
    for (int64_t b : sizes) {
      const AllreduceRow* a = find(t, "auto", b);
      if (!a) continue;
      const AllreduceRow* best = nullptr;
      for (const char* c : kCandidates)
        if (const AllreduceRow* r = find(t, c, b); r && (!best || r->seconds < best->seconds))
          best = r;
      const AllreduceRow* native = find(t, "native", b);
      const double vs_best = best ? best->seconds / a->seconds : NAN;
      const double vs_native = native ? native->seconds / a->seconds : NAN;
      if (best) worst_best = std::min(worst_best, vs_best);
      if (native) worst_native = std::min(worst_native, vs_native);
      const bool miss = (best && vs_best < 0.95) || (native && vs_native < 0.9);
      table.push_back({size_text(b), best ? best->algo : "-",
                       best ? fmt(best->seconds * 1e6, 1) : "-", a->chosen,
                       fmt(a->seconds * 1e6, 1), fmt(vs_best, 2), fmt(vs_native, 2),
                       miss ? "MISS" : ""});
      if (miss) {
        std::string why;
        if (best && a->chosen != best->algo) {
          const AllreduceAlgorithm c = algo_of(a->chosen), w = algo_of(best->algo);
          const AllreduceRow* chosen_row = find(t, a->chosen, b);
          why = detail::str_cat(
              "the model picked ", a->chosen, " (PREDICTED ",
              fmt(dist::predict_allreduce(model, c, b) * 1e6, 1), " us",
              chosen_row ? detail::str_cat(", measured ", fmt(chosen_row->seconds * 1e6, 1), " us")
                         : std::string(),
              "), the fastest measured was ", best->algo, " (PREDICTED ",
              fmt(dist::predict_allreduce(model, w, b) * 1e6, 1), " us, measured ",
              fmt(best->seconds * 1e6, 1), " us)");
        } else {
          why = detail::str_cat("auto ran ", a->chosen, ", the fastest, but timed ",
                                fmt(a->seconds * 1e6, 1), " us against its own row's ",
                                fmt(best ? best->seconds * 1e6 : NAN, 1), " us: run-to-run spread");
        }
        misses.push_back(detail::str_cat(size_text(b), ": ", why));
      }
      auto_json.push_back(JsonObject()
                              .raw("bytes", std::to_string(b))
                              .add("chosen", a->chosen)
                              .add("best", best ? best->algo : "")
                              .add("auto_vs_best", vs_best)
                              .add("auto_vs_native", vs_native)
                              .add("miss", miss)
                              .str());
    }
    os << "\ntuner: auto against the fastest of native, ring, tree and rhd and against native "
          "(MEASURED; x = that time / auto's time)\n";
    print_table(os,
                {"size", "fastest", "time(us)", "auto chose", "auto(us)", "x best", "x native", ""},
                table, "  ");
    os << "  goal: auto >= 0.95x the fastest and >= 0.9x native at every size. ";
    if (misses.empty()) {
      os << "It holds at all " << auto_json.size() << " sizes (worst " << fmt(worst_best, 2)
         << "x the fastest, " << fmt(worst_native, 2) << "x native).\n";
    } else {
      os << "It misses at " << misses.size() << " of " << auto_json.size() << " sizes:\n";
      for (const std::string& m : misses) os << "    " << m << "\n";
    }
    std::vector<std::string> misses_json;
    for (const std::string& m : misses) misses_json.push_back(json_string(m));
    out.raw("auto", json_array(auto_json))
        .raw("goal", JsonObject()
                         .add("holds", misses.empty())
                         .add("worst_vs_best", worst_best)
                         .add("worst_vs_native", worst_native)
                         .raw("misses", json_array(misses_json))
                         .str());
  }

  // --- what pipelining buys the ring.
  if (t.count("ring") && t.count("ring_blocking")) {
    std::vector<std::vector<std::string>> table;
    std::vector<std::string> js;
    for (int64_t b : sizes) {
      const AllreduceRow* p = find(t, "ring", b);
      const AllreduceRow* q = find(t, "ring_blocking", b);
      if (!p || !q) continue;
      table.push_back({size_text(b), fmt(q->seconds * 1e6, 1), fmt(p->seconds * 1e6, 1),
                       fmt(q->seconds / p->seconds, 2)});
      js.push_back(JsonObject()
                       .raw("bytes", std::to_string(b))
                       .add("speedup", q->seconds / p->seconds)
                       .str());
    }
    os << "\npipelining: the ring with segment k+1 in flight while k is reduced, against one "
          "blocking sendrecv per segment (MEASURED)\n";
    print_table(os, {"size", "blocking(us)", "pipelined(us)", "speedup"}, table, "  ");
    out.raw("pipelining", json_array(js));
  }

  // --- crossovers, measured against the model's.
  std::vector<std::vector<std::string>> table;
  std::vector<std::string> js;
  for (size_t i = 0; i < std::size(kCandidates); ++i)
    for (size_t j = i + 1; j < std::size(kCandidates); ++j) {
      const std::string a = kCandidates[i], b = kCandidates[j];
      if (!t.count(a) || !t.count(b) || ranks < 2) continue;
      // Measured: the consecutive sizes between which the faster of the two changes.
      std::vector<std::string> measured;
      const AllreduceRow *pa = nullptr, *pb = nullptr;
      for (int64_t s : sizes) {
        const AllreduceRow* ra = find(t, a, s);
        const AllreduceRow* rb = find(t, b, s);
        if (!ra || !rb) continue;
        if (pa && (pa->seconds < pb->seconds) != (ra->seconds < rb->seconds))
          measured.push_back(detail::str_cat(size_text(pa->bytes), "-", size_text(s), " (",
                                             ra->seconds < rb->seconds ? a : b, " faster above)"));
        pa = ra;
        pb = rb;
      }
      auto describe_crossing = [&](Predict predict) {
        const std::optional<int64_t> x = predicted_crossover(model, predict, algo_of(a), algo_of(b),
                                                             sizes.front(), sizes.back());
        if (!x) return std::make_pair(std::string("none in range"), std::string("null"));
        const bool a_above = predict(model, algo_of(a), *x) < predict(model, algo_of(b), *x);
        return std::make_pair(detail::str_cat(*x, " B (", a_above ? a : b, " faster above)"),
                              std::to_string(*x));
      };
      const auto [pred, pred_json] = describe_crossing(&dist::predict_allreduce);
      const auto [book, book_json] = describe_crossing(&dist::textbook_allreduce);
      std::string m;
      for (const std::string& x : measured) m += (m.empty() ? "" : "; ") + x;
      table.push_back({a + " vs " + b, m.empty() ? "none in range" : m, pred, book});
      std::vector<std::string> mj;
      for (const std::string& x : measured) mj.push_back(json_string(x));
      js.push_back(JsonObject()
                       .add("a", a)
                       .add("b", b)
                       .raw("measured", json_array(mj))
                       .raw("predicted_bytes", pred_json)
                       .raw("textbook_bytes", book_json)
                       .str());
    }
  if (!table.empty()) {
    os << "\ncrossovers: where the faster of two algorithms changes, MEASURED (between two sizes "
          "of the table), against PREDICTED\nby the tuner (each algorithm's calibrated curve: what "
          "auto uses) and by the textbook's alpha-beta-gamma\nformulas on the calibrated exchange, "
          "one-way and reduce costs (to the byte)\n";
    print_table(os, {"pair", "measured", "tuner", "textbook"}, table, "  ");
  }
  out.raw("crossovers", json_array(js));
  return out.str();
}

}  // namespace stoke::bench
