// The tuner: the cost model, its calibration, and the collectives by algorithm (dist/tuner.h).
#include "dist/tuner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>

#include "dist/algorithm_util.h"
#include "dist/rhd.h"
#include "dist/ring.h"
#include "dist/tree.h"
#include "ops/creation.h"

namespace stoke::dist {

const char* allreduce_algorithm_name(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::native:
      return "native";
    case AllreduceAlgorithm::ring:
      return "ring";
    case AllreduceAlgorithm::tree:
      return "tree";
    case AllreduceAlgorithm::rhd:
      return "rhd";
    case AllreduceAlgorithm::automatic:
      return "auto";
  }
  return "?";
}

AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name, const std::string& what) {
  for (AllreduceAlgorithm a :
       {AllreduceAlgorithm::native, AllreduceAlgorithm::ring, AllreduceAlgorithm::tree,
        AllreduceAlgorithm::rhd, AllreduceAlgorithm::automatic})
    if (name == allreduce_algorithm_name(a)) return a;
  throw Error(::stoke::detail::str_cat(
      what, ": expected 'native', 'ring', 'tree', 'rhd' or 'auto', got '", name, "'"));
}

// --- the model -----------------------------------------------------------------------------------

double CostCurve::at(double bytes) const {
  if (points.empty()) return 0;
  if (points.size() == 1) return points[0].second;
  // The range holding bytes, or the first or last one to extend.
  size_t i = 1;
  while (i + 1 < points.size() && bytes > points[i].first) ++i;
  const auto [x0, y0] = points[i - 1];
  const auto [x1, y1] = points[i];
  const double slope = x1 > x0 ? (y1 - y0) / (x1 - x0) : 0;
  return std::max(0.0, y0 + (bytes - x0) * slope);
}

CostCurve CostCurve::line(double alpha_s, double beta_s) {
  return {{{0.0, alpha_s}, {1.0, alpha_s + beta_s}}};
}

double CostCurve::alpha_s() const {
  return points.empty() ? 0 : points.front().second;
}

double CostCurve::beta_s() const {
  if (points.size() < 2) return 0;
  const auto [x0, y0] = points[points.size() - 2];
  const auto [x1, y1] = points.back();
  return x1 > x0 ? (y1 - y0) / (x1 - x0) : 0;
}

namespace {

// The sizes AllreduceModel::allreduce_table covers (and describe() prints).
constexpr int64_t kAllreduceTableBytes = int64_t{1} << 30;

struct Shape {
  int p = 1, p2 = 1, rem = 0, levels = 0, halvings = 0;
};

Shape shape_of(int p) {
  Shape s;
  s.p = p;
  s.p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(std::max(p, 1))));
  s.rem = p - s.p2;
  s.levels = p > 1 ? std::countr_zero(std::bit_ceil(static_cast<unsigned>(p))) : 0;
  s.halvings = std::countr_zero(static_cast<unsigned>(s.p2));
  return s;
}

// A range of m bytes moved in one step: its whole segments, then the partial one (an empty range
// is one empty message); both ways at once (X), or one way (P).
double segmented(const CostCurve& c, const AllreduceModel& m, double bytes) {
  const double seg = static_cast<double>(m.segment_bytes);
  const double whole = std::floor(bytes / seg), rest = bytes - whole * seg;
  return whole * c.at(seg) + (rest > 0 || whole == 0 ? c.at(rest) : 0.0);
}

double xfer(const AllreduceModel& m, double bytes) {
  return segmented(m.exchange, m, bytes);
}

double one(const AllreduceModel& m, double bytes) {
  return segmented(m.oneway, m, bytes);
}

constexpr AllreduceAlgorithm kAllreduceCandidates[] = {
    AllreduceAlgorithm::native, AllreduceAlgorithm::ring, AllreduceAlgorithm::tree,
    AllreduceAlgorithm::rhd};
constexpr AllreduceAlgorithm kScatterCandidates[] = {
    AllreduceAlgorithm::native, AllreduceAlgorithm::ring, AllreduceAlgorithm::rhd};

template <class Predict, size_t K>
AllreduceAlgorithm cheapest(const AllreduceAlgorithm (&candidates)[K], Predict&& predict) {
  AllreduceAlgorithm best = candidates[0];
  double best_s = predict(best);
  for (AllreduceAlgorithm a : candidates) {
    const double s = predict(a);
    if (s < best_s) {
      best = a;
      best_s = s;
    }
  }
  return best;
}

}  // namespace

namespace {

// The measured curve of `a`, or null.
const CostCurve* measured(const std::map<AllreduceAlgorithm, CostCurve>& curves,
                          AllreduceAlgorithm a) {
  auto it = curves.find(a);
  return it == curves.end() || it->second.points.empty() ? nullptr : &it->second;
}

double textbook_reduce_scatter(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes);
double textbook_allgather(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes);

}  // namespace

double predict_allreduce(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes) {
  if (a == AllreduceAlgorithm::automatic)
    return predict_allreduce(m, choose_allreduce(m, bytes), bytes);
  if (const CostCurve* c = measured(m.measured_allreduce, a))
    return c->at(static_cast<double>(bytes));
  return textbook_allreduce(m, a, bytes);
}

double predict_reduce_scatter(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes) {
  if (a == AllreduceAlgorithm::automatic)
    return predict_reduce_scatter(m, choose_reduce_scatter(m, bytes), bytes);
  if (const CostCurve* c = measured(m.measured_reduce_scatter, a))
    return c->at(static_cast<double>(bytes));
  return textbook_reduce_scatter(m, a, bytes);
}

double predict_allgather(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes) {
  if (a == AllreduceAlgorithm::automatic)
    return predict_allgather(m, choose_allgather(m, bytes), bytes);
  if (const CostCurve* c = measured(m.measured_allgather, a))
    return c->at(static_cast<double>(bytes));
  return textbook_allgather(m, a, bytes);
}

double textbook_allreduce(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes) {
  const Shape s = shape_of(m.ranks);
  const double n = static_cast<double>(bytes), p = s.p;
  if (s.p == 1 && a != AllreduceAlgorithm::native && a != AllreduceAlgorithm::automatic) return 0;
  switch (a) {
    case AllreduceAlgorithm::native:
      return m.native_allreduce.at(n);
    case AllreduceAlgorithm::ring:
      return 2 * (p - 1) * xfer(m, n / p) + (p - 1) * m.reduce.at(n / p);
    case AllreduceAlgorithm::tree:
      return 2 * s.levels * one(m, n) + s.levels * m.reduce.at(n);
    case AllreduceAlgorithm::rhd: {
      double t = 0, part = n;
      for (int j = 0; j < s.halvings; ++j) {
        part /= 2;
        t += 2 * xfer(m, part) + m.reduce.at(part);
      }
      if (s.rem > 0) t += 2 * one(m, n) + m.reduce.at(n);
      return t;
    }
    case AllreduceAlgorithm::automatic:
      return predict_allreduce(m, choose_allreduce(m, bytes), bytes);
  }
  return 0;
}

namespace {

double textbook_reduce_scatter(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes) {
  const Shape s = shape_of(m.ranks);
  const double n = static_cast<double>(bytes), p = s.p;
  if (s.p == 1 && a != AllreduceAlgorithm::native && a != AllreduceAlgorithm::automatic) return 0;
  switch (a) {
    case AllreduceAlgorithm::native:
      return m.native_reduce_scatter.at(n);
    case AllreduceAlgorithm::ring:
      return (p - 1) * (xfer(m, n / p) + m.reduce.at(n / p));
    case AllreduceAlgorithm::tree:
      return INFINITY;  // no tree form
    case AllreduceAlgorithm::rhd: {
      double t = 0, part = n;
      for (int j = 0; j < s.halvings; ++j) {
        part /= 2;
        t += xfer(m, part) + m.reduce.at(part);
      }
      // The fold sends the whole input, the unfold one block back.
      if (s.rem > 0) t += one(m, n) + m.reduce.at(n) + one(m, n / p);
      return t;
    }
    case AllreduceAlgorithm::automatic:
      return predict_reduce_scatter(m, choose_reduce_scatter(m, bytes), bytes);
  }
  return 0;
}

double textbook_allgather(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes) {
  const Shape s = shape_of(m.ranks);
  const double n = static_cast<double>(bytes), p = s.p;
  if (s.p == 1 && a != AllreduceAlgorithm::native && a != AllreduceAlgorithm::automatic) return 0;
  switch (a) {
    case AllreduceAlgorithm::native:
      return m.native_allgather.at(n);
    case AllreduceAlgorithm::ring:
      return (p - 1) * xfer(m, n / p);
    case AllreduceAlgorithm::tree:
      return INFINITY;
    case AllreduceAlgorithm::rhd: {
      // Doubling moves n/p', 2n/p', ... n/2 (the same ranges as halving, in reverse).
      double t = 0, part = n;
      for (int j = 0; j < s.halvings; ++j) {
        part /= 2;
        t += xfer(m, part);
      }
      // The fold sends one block, the unfold the whole output.
      if (s.rem > 0) t += one(m, n / p) + one(m, n);
      return t;
    }
    case AllreduceAlgorithm::automatic:
      return predict_allgather(m, choose_allgather(m, bytes), bytes);
  }
  return 0;
}

}  // namespace

AllreduceAlgorithm choose_allreduce(const AllreduceModel& m, int64_t bytes) {
  const auto& table = m.allreduce_table;
  if (!table.empty() && bytes >= table.front().first && bytes <= kAllreduceTableBytes) {
    size_t i = 0;
    while (i + 1 < table.size() && table[i + 1].first <= bytes) ++i;
    return table[i].second;
  }
  return cheapest(kAllreduceCandidates,
                  [&](AllreduceAlgorithm a) { return predict_allreduce(m, a, bytes); });
}

AllreduceAlgorithm choose_reduce_scatter(const AllreduceModel& m, int64_t bytes) {
  return cheapest(kScatterCandidates,
                  [&](AllreduceAlgorithm a) { return predict_reduce_scatter(m, a, bytes); });
}

AllreduceAlgorithm choose_allgather(const AllreduceModel& m, int64_t bytes) {
  return cheapest(kScatterCandidates,
                  [&](AllreduceAlgorithm a) { return predict_allgather(m, a, bytes); });
}

std::vector<std::pair<int64_t, AllreduceAlgorithm>> allreduce_choices(const AllreduceModel& m,
                                                                      int64_t max_bytes) {
  std::vector<std::pair<int64_t, AllreduceAlgorithm>> out;
  int64_t prev = 1;
  out.emplace_back(1, choose_allreduce(m, 1));
  for (int64_t b = 2; b <= max_bytes; b = b > max_bytes / 2 ? max_bytes + 1 : b * 2) {
    const AllreduceAlgorithm a = choose_allreduce(m, b);
    if (a != out.back().second) {
      // The first size in (prev, b] where the choice is no longer the previous one.
      int64_t lo = prev, hi = b;
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (choose_allreduce(m, mid) == out.back().second ? lo : hi) = mid;
      }
      out.emplace_back(hi, choose_allreduce(m, hi));
      if (out.back().second != a) out.emplace_back(b, a);  // two changes within one factor 2
    }
    prev = b;
  }
  return out;
}

namespace {

std::string bytes_text(int64_t b) {
  if (b >= (int64_t{1} << 20) && b % (int64_t{1} << 20) == 0)
    return ::stoke::detail::str_cat(b >> 20, " MiB");
  if (b >= 1024 && b % 1024 == 0) return ::stoke::detail::str_cat(b >> 10, " KiB");
  return ::stoke::detail::str_cat(b, " B");
}

std::string us(double s) {
  std::ostringstream o;
  o.precision(3);
  o << s * 1e6 << " us";
  return o.str();
}

std::string gbs(double beta) {
  std::ostringstream o;
  o.precision(3);
  if (beta > 0)
    o << 1e-9 / beta << " GB/s";
  else
    o << "inf GB/s";
  return o.str();
}

}  // namespace

std::string describe(const AllreduceModel& m) {
  std::ostringstream o;
  o << "alpha-beta model of " << m.ranks << " rank" << (m.ranks == 1 ? "" : "s") << " ("
    << (m.on_cpu ? "cpu" : "device") << " tensors, calibrated in " << us(m.calibration_s)
    << ", segments of " << bytes_text(m.segment_bytes)
    << "); MEASURED us at each size, linear between:\n";
  auto row = [&](const std::string& name, const CostCurve& c) {
    o << "    " << name;
    for (const auto& [bytes, seconds] : c.points) {
      std::ostringstream cell;
      cell.precision(3);
      cell << seconds * 1e6;
      o << std::string(11 - std::min<size_t>(10, cell.str().size()), ' ') << cell.str();
    }
    o << "\n";
  };
  o << "    size                    ";
  for (const auto& p : m.exchange.points) {
    const std::string b = bytes_text(static_cast<int64_t>(p.first));
    o << std::string(11 - std::min<size_t>(10, b.size()), ' ') << b;
  }
  o << "\n";
  row("exchange step X(m)      ", m.exchange);
  row("one way P(m)            ", m.oneway);
  row("reduce R(m)             ", m.reduce);
  row("native allreduce        ", m.native_allreduce);
  row("native reduce_scatter   ", m.native_reduce_scatter);
  row("native allgather        ", m.native_allgather);
  for (const auto& [a, c] : m.measured_allreduce)
    row(::stoke::detail::str_cat(
            "allreduce ", allreduce_algorithm_name(a),
            std::string(14 - std::string(allreduce_algorithm_name(a)).size(), ' '))
            .c_str(),
        c);
  o << "  (X, P, R: the textbook's parts; the allreduce rows: each algorithm timed whole, what "
       "auto "
       "uses)\n  alpha = X(8 B) = "
    << us(m.exchange.alpha_s()) << ", beta = 1 / " << gbs(m.exchange.beta_s()) << ", gamma = 1 / "
    << gbs(m.reduce.beta_s()) << " (largest range); native allreduce "
    << us(m.native_allreduce.alpha_s()) << " + n / " << gbs(m.native_allreduce.beta_s())
    << "\n  auto allreduce:";
  const auto choices = allreduce_choices(m, kAllreduceTableBytes);
  for (size_t i = 0; i < choices.size(); ++i) {
    o << (i ? ", " : " ") << allreduce_algorithm_name(choices[i].second) << " from "
      << bytes_text(choices[i].first);
  }
  o << " (up to 1 GiB)\n";
  return o.str();
}

// --- calibration ---------------------------------------------------------------------------------

namespace {

// The median, the benchmark's statistic.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(int64_t t0_ns) {
  return static_cast<double>(internal::now_ns() - t0_ns) * 1e-9;
}

// A device's work is done when a host copy of one element is (the copy waits for the stream).
void sync(const Tensor& t) {
  if (!t.device().is_cpu() && t.numel() > 0) (void)t.narrow(0, 0, 1).to(Device::cpu());
}

// The median of reps timed runs of fn, after two untimed (the first calls of an engine
// set up connections and buffers).
template <class F>
double timed(int reps, const Tensor& sync_on, F&& fn) {
  for (int i = 0; i < 2; ++i) {
    fn();
    sync(sync_on);
  }
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const int64_t t0 = internal::now_ns();
    fn();
    sync(sync_on);
    s.push_back(seconds_since(t0));
  }
  return median(std::move(s));
}

// The points, each at least the one before (a larger message never costs less): noise in a
// measurement would otherwise make a range's slope negative.
CostCurve curve_of(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  CostCurve c;
  double floor = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    floor = std::max(floor, seconds[i]);
    c.points.emplace_back(bytes[i], floor);
  }
  return c;
}

// Each candidate's own time at each size: median over reps of a call after a barrier (as the
// benchmark times it), the largest over ranks. A candidate more than 3 times slower than the
// fastest at two sizes in a row is not timed at larger ones (its curve extends by its last range:
// the tree's, which sends the whole tensor at every level, at 16 MiB would take a second here).
// The decision is taken on the agreed (largest over ranks) figures, so every rank takes it alike.
void measure_candidates(Communicator& comm, Device device, const CalibrationOptions& options,
                        const std::vector<int64_t>& sizes, AllreduceModel& m) {
  const int p = comm.size();
  const TensorOptions on{.dtype = DType::f32, .device = device};
  const CollectiveOptions algo_options{.segment_bytes = options.segment_bytes};
  enum Kind { kAllreduce, kReduceScatter, kAllgather };
  const std::vector<Kind> kinds = options.scatter_gather
                                      ? std::vector<Kind>{kAllreduce, kReduceScatter, kAllgather}
                                      : std::vector<Kind>{kAllreduce};
  for (Kind kind : kinds) {
    const std::vector<AllreduceAlgorithm> candidates =
        kind == kAllreduce ? std::vector<AllreduceAlgorithm>(std::begin(kAllreduceCandidates),
                                                             std::end(kAllreduceCandidates))
                           : std::vector<AllreduceAlgorithm>(std::begin(kScatterCandidates),
                                                             std::end(kScatterCandidates));
    auto& curves = kind == kAllreduce       ? m.measured_allreduce
                   : kind == kReduceScatter ? m.measured_reduce_scatter
                                            : m.measured_allgather;
    std::map<AllreduceAlgorithm, int> slow;  // consecutive sizes at > 3x the fastest
    std::map<AllreduceAlgorithm, std::vector<double>> x, y;
    for (int64_t b : sizes) {
      const int64_t n = b / 4, block = std::max<int64_t>(1, n / p);
      Tensor t = zeros({kind == kAllreduce ? n : block * p}, on), part = zeros({block}, on);
      std::vector<AllreduceAlgorithm> timed_now;
      for (AllreduceAlgorithm a : candidates)
        if (slow[a] < 2) timed_now.push_back(a);
      // The candidates take turns, repetition by repetition, so that a slow phase of the machine
      // falls on all of them alike rather than on whichever was being timed then.
      std::vector<std::vector<double>> s(timed_now.size());
      for (int i = 0; i < 2 + options.reps; ++i) {
        for (size_t j = 0; j < timed_now.size(); ++j) {
          comm.barrier();
          const int64_t t0 = internal::now_ns();
          if (kind == kAllreduce)
            allreduce(comm, t, ReduceOp::sum, timed_now[j], algo_options);
          else if (kind == kReduceScatter)
            reduce_scatter(comm, t, part, ReduceOp::sum, timed_now[j], algo_options);
          else
            allgather(comm, part, t, timed_now[j], algo_options);
          sync(t);
          if (i >= 2) s[j].push_back(seconds_since(t0));
        }
      }
      std::vector<double> v;
      for (auto& sj : s) v.push_back(median(std::move(sj)));
      Tensor all = from_vector<double>(v, {static_cast<int64_t>(v.size())},
                                       {.dtype = device.is_cpu() ? DType::f64 : DType::f32})
                       .to(device);
      comm.allreduce(all, ReduceOp::max);
      const std::vector<double> w = all.to(Device::cpu()).to(DType::f64).to_vector<double>();
      const double best = *std::min_element(w.begin(), w.end());
      for (size_t i = 0; i < timed_now.size(); ++i) {
        const AllreduceAlgorithm a = timed_now[i];
        x[a].push_back(static_cast<double>(kind == kAllreduce ? b : block * p * 4));
        y[a].push_back(w[i]);
        slow[a] = w[i] > 3 * best ? slow[a] + 1 : 0;
      }
    }
    for (AllreduceAlgorithm a : candidates) curves[a] = curve_of(x[a], y[a]);
  }
}

}  // namespace

AllreduceModel calibrate_allreduce_model(Communicator& comm, Device device,
                                         const CalibrationOptions& options) {
  STOKE_CHECK(options.large_bytes >= 64 && options.reps >= 1 && options.segment_bytes >= 1,
              "calibrate_allreduce_model",
              "expected large_bytes >= 64, reps >= 1 and segment_bytes >= 1, got ",
              options.large_bytes, ", ", options.reps, ", ", options.segment_bytes);
  AllreduceModel m;
  comm.run_in_order([&] {
    const int64_t start = internal::now_ns();
    const int p = comm.size(), r = comm.rank();
    m.ranks = p;
    m.on_cpu = device.is_cpu();
    m.segment_bytes = options.segment_bytes;
    std::vector<int64_t> sizes;  // bytes, whole f32 elements
    // Every factor 4 to 16 from 4 KiB: between 64 KiB and 16 MiB the caches and MPI's eager and
    // rendezvous protocols bend each curve (a 4 MiB point interpolated from 1 and 16 MiB was
    // predicted 1.6x slow and picked the wrong algorithm).
    for (int64_t b : {int64_t{8}, int64_t{4} << 10, int64_t{64} << 10, int64_t{256} << 10,
                      int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20, int64_t{64} << 20})
      if (b < options.large_bytes) sizes.push_back(b);
    sizes.push_back(options.large_bytes / 4 * 4);
    const TensorOptions on{.dtype = DType::f32, .device = device};
    // Per size: exchange, one way, reduce, native allreduce, reduce_scatter, allgather (this
    // rank's figures); the byte counts beside (reduce_scatter and allgather round to blocks).
    std::vector<double> v;
    std::vector<double> bytes;
    for (int64_t b : sizes) {
      const int64_t n = b / 4;
      {
        // One exchange step: isend to the next rank, irecv from the previous, both waited for.
        Communicator::Scope scope(comm, "allreduce_calibration");
        const int next = (r + 1) % p, prev = (r + p - 1) % p;
        Tensor out = zeros({n}, on), in = empty({n}, on);
        v.push_back(p == 1 ? 0.0 : timed(options.reps, in, [&] {
          Request rr = comm.irecv(in, prev, internal::kAlgorithmTag);
          Request sr = comm.isend(out, next, internal::kAlgorithmTag);
          comm.wait(rr);
          comm.wait(sr);
        }));
        // One way: half a ping-pong between ranks 2i and 2i+1 (a last rank of an odd group
        // sits it out).
        const int partner = r ^ 1;
        v.push_back(partner >= p ? 0.0 : 0.5 * timed(options.reps, in, [&] {
                                           for (int leg = 0; leg < 2; ++leg) {
                                             if ((r % 2 == 0) == (leg == 0)) {
                                               Request sr = comm.isend(out, partner,
                                                                       internal::kAlgorithmTag);
                                               comm.wait(sr);
                                             } else {
                                               Request rr =
                                                   comm.irecv(in, partner, internal::kAlgorithmTag);
                                               comm.wait(rr);
                                             }
                                           }
                                         }));
        Tensor acc = zeros({n}, on);
        v.push_back(timed(options.reps, acc, [&] {
          internal::reduce_into(acc, out, ReduceOp::sum, comm.op_label());
        }));
      }
      Tensor t = zeros({n}, on);
      v.push_back(timed(options.reps, t, [&] { comm.allreduce(t, ReduceOp::sum); }));
      const int64_t block = std::max<int64_t>(1, n / p);
      Tensor whole = zeros({block * p}, on), part = zeros({block}, on);
      v.push_back(
          timed(options.reps, part, [&] { comm.reduce_scatter(whole, part, ReduceOp::sum); }));
      v.push_back(timed(options.reps, whole, [&] { comm.allgather(part, whole); }));
      bytes.push_back(static_cast<double>(b));
      bytes.push_back(static_cast<double>(block * p * 4));
    }
    // The slowest rank's figures, on every rank: the same model, so the same choices.
    v.push_back(seconds_since(start));
    Tensor all = from_vector<double>(v, {static_cast<int64_t>(v.size())},
                                     {.dtype = device.is_cpu() ? DType::f64 : DType::f32})
                     .to(device);
    comm.allreduce(all, ReduceOp::max);
    const std::vector<double> w = all.to(Device::cpu()).to(DType::f64).to_vector<double>();
    constexpr int kCols = 6;
    std::vector<double> x, rs_x, col[kCols];
    for (size_t i = 0; i < sizes.size(); ++i) {
      x.push_back(bytes[2 * i]);
      rs_x.push_back(bytes[2 * i + 1]);
      for (int k = 0; k < kCols; ++k) col[k].push_back(w[kCols * i + static_cast<size_t>(k)]);
    }
    m.exchange = curve_of(x, col[0]);
    m.oneway = curve_of(x, col[1]);
    m.reduce = curve_of(x, col[2]);
    m.native_allreduce = curve_of(x, col[3]);
    m.native_reduce_scatter = curve_of(rs_x, col[4]);
    m.native_allgather = curve_of(rs_x, col[5]);
    measure_candidates(comm, device, options, sizes, m);
    m.allreduce_table = allreduce_choices(m, kAllreduceTableBytes);
    m.calibration_s = std::max(w.back(), seconds_since(start));
  });
  return m;
}

std::shared_ptr<const AllreduceModel> allreduce_model(Communicator& comm, Device device,
                                                      const CalibrationOptions& options) {
  std::shared_ptr<const AllreduceModel> m;
  comm.run_in_order([&] {
    m = comm.cached_allreduce_model();
    if (m && m->on_cpu == device.is_cpu() &&
        (!options.scatter_gather || !m->measured_reduce_scatter.empty()))
      return;
    m = std::make_shared<const AllreduceModel>(calibrate_allreduce_model(comm, device, options));
    comm.cache_allreduce_model(m);
  });
  return m;
}

// --- the collectives by algorithm ----------------------------------------------------------------

namespace {

int64_t bytes_of(const Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

}  // namespace

void allreduce(Communicator& comm, Tensor& t, ReduceOp op, AllreduceAlgorithm algorithm,
               const CollectiveOptions& options) {
  comm.run_in_order([&] {
    AllreduceAlgorithm a = algorithm;
    if (a == AllreduceAlgorithm::automatic) {
      // Inside run_in_order: the cached model without a lock (allreduce_model calibrates first).
      const AllreduceModel* m = comm.cached_allreduce_model_in_order();
      if (m && m->on_cpu == t.device().is_cpu())
        a = choose_allreduce(*m, bytes_of(t));
      else
        a = choose_allreduce(*allreduce_model(comm, t.device()), bytes_of(t));
    }
    switch (a) {
      case AllreduceAlgorithm::ring:
        return ring_allreduce(comm, t, op, options);
      case AllreduceAlgorithm::tree:
        return tree_allreduce(comm, t, op, options);
      case AllreduceAlgorithm::rhd:
        return rhd_allreduce(comm, t, op, options);
      default:
        return comm.allreduce(t, op);
    }
  });
}

void reduce_scatter(Communicator& comm, const Tensor& input, Tensor& output, ReduceOp op,
                    AllreduceAlgorithm algorithm, const CollectiveOptions& options) {
  STOKE_CHECK(algorithm != AllreduceAlgorithm::tree, "stoke::reduce_scatter",
              "a tree has no reduce-scatter form: use native, ring, rhd or auto");
  comm.run_in_order([&] {
    AllreduceAlgorithm a = algorithm;
    if (a == AllreduceAlgorithm::automatic)
      a = choose_reduce_scatter(*allreduce_model(comm, input.device(), {.scatter_gather = true}),
                                bytes_of(input));
    switch (a) {
      case AllreduceAlgorithm::ring:
        return ring_reduce_scatter(comm, input, output, op, options);
      case AllreduceAlgorithm::rhd:
        return rhd_reduce_scatter(comm, input, output, op, options);
      default:
        return comm.reduce_scatter(input, output, op);
    }
  });
}

void allgather(Communicator& comm, const Tensor& input, Tensor& output,
               AllreduceAlgorithm algorithm, const CollectiveOptions& options) {
  STOKE_CHECK(algorithm != AllreduceAlgorithm::tree, "stoke::allgather",
              "a tree has no allgather form here: use native, ring, rhd or auto");
  comm.run_in_order([&] {
    AllreduceAlgorithm a = algorithm;
    if (a == AllreduceAlgorithm::automatic)
      a = choose_allgather(*allreduce_model(comm, output.device(), {.scatter_gather = true}),
                           bytes_of(output));
    switch (a) {
      case AllreduceAlgorithm::ring:
        return ring_allgather(comm, input, output, options);
      case AllreduceAlgorithm::rhd:
        return rhd_allgather(comm, input, output, options);
      default:
        return comm.allgather(input, output);
    }
  });
}

}  // namespace stoke::dist
