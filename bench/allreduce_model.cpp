// stoke-bench-allreduce's alpha-beta model: fitted to the ring measured on this machine, then used
// to project ring and tree allreduce times at scales a 2-core machine cannot run (8 ... 1024
// ranks, NVLink and InfiniBand links). See bench/allreduce.cpp for the measurement.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench/allreduce.h"
#include "bench/bench_util.h"
#include "core/error.h"

namespace stoke::bench {

namespace {

struct Link {
  const char* key;  // the JSON name
  const char* name;
  double bytes_per_s;
};

// Per direction, per GPU. 300 GB/s is a round, conservative figure for H100's NVLink 4 (the spec
// sheet's 18 links make 450 GB/s per direction; collectives reach less). NDR InfiniBand is
// 400 Gb/s per port = 50 GB/s, one port per GPU in a DGX H100.
constexpr Link kLinks[] = {
    {"nvlink", "NVLink", 300e9},
    {"ib_ndr", "IB NDR", 50e9},
};

double ring_seconds(int n, double bytes, double alpha, double bytes_per_s) {
  return 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / bytes_per_s;
}

// NCCL's double binary tree: two binary trees, each reducing half the data up to its root and
// broadcasting it back down, built so that a rank that is an inner node in one is a leaf in the
// other. Each rank then sends S and receives S going up and again going down: 2S over its link,
// pipelined in chunks so that the depth log2(N) is paid in latency only, twice (up and down).
// Ignored: the pipeline's fill (a few chunk times) and the extra hop between the two roots.
double tree_seconds(int n, double bytes, double alpha, double bytes_per_s) {
  return 2.0 * std::log2(static_cast<double>(n)) * alpha + 2.0 * bytes / bytes_per_s;
}

std::string ms(double seconds) {
  return fmt(seconds * 1e3, 3);
}

std::string int_json(int64_t v) {
  return std::to_string(v);
}

}  // namespace

void print_table(std::ostream& os, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], c < r.size() ? r[c].size() : 0);
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = indent;
    for (size_t c = 0; c < header.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      s += std::string(width[c] - cell.size(), ' ') + cell + (c + 1 < header.size() ? "  " : "");
    }
    os << s << '\n';
  };
  line(header);
  std::vector<std::string> rule;
  for (size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& r : rows) line(r);
}

RingFit fit_ring(const std::vector<AllreducePoint>& ring, int ranks) {
  RingFit fit;
  if (ranks < 2) {
    fit.why = "one rank: the ring takes no steps, there is nothing to fit";
    return fit;
  }
  // With n fixed, steps = 2(n-1) is the same for every point, so T = c0 + c1 * S: alpha is the
  // intercept per step and beta the slope per byte moved.
  double sw = 0, sws = 0, swss = 0, swt = 0, swst = 0;
  for (const AllreducePoint& p : ring) {
    if (!(p.seconds > 0)) continue;
    const double w = 1.0 / (p.seconds * p.seconds), s = static_cast<double>(p.bytes);
    sw += w;
    sws += w * s;
    swss += w * s * s;
    swt += w * p.seconds;
    swst += w * s * p.seconds;
    ++fit.points;
  }
  const double det = sw * swss - sws * sws;
  if (fit.points < 2 || !(std::fabs(det) > 0)) {
    fit.why = detail::str_cat("needs two sizes or more, got ", fit.points);
    return fit;
  }
  const double c0 = (swt * swss - sws * swst) / det, c1 = (sw * swst - sws * swt) / det;
  const double steps = 2.0 * (ranks - 1), moved_per_byte = 2.0 * (ranks - 1) / ranks;
  fit.alpha_s = c0 / steps;
  fit.beta_s = c1 / moved_per_byte;
  for (const AllreducePoint& p : ring) {
    if (!(p.seconds > 0)) continue;
    const double model = c0 + c1 * static_cast<double>(p.bytes);
    fit.max_rel_err = std::max(fit.max_rel_err, std::fabs(model - p.seconds) / p.seconds);
  }
  if (!(c0 > 0) || !(c1 > 0)) {
    fit.why = detail::str_cat("the fit gave a non-positive latency or inverse bandwidth (",
                              c0 * 1e6, " us, ", c1, " s/B): too few or too noisy sizes");
    return fit;
  }
  fit.ok = true;
  return fit;
}

std::string print_model(std::ostream& os, const RingFit& fit, int ranks,
                        const ProjectionOptions& o) {
  JsonObject fit_json;
  fit_json.add("source", "measured")
      .add("algo", "ring")
      .add("ranks", ranks)
      .add("points", fit.points);
  fit_json.add("weighting", "relative (1/T^2)");
  os << "\nalpha-beta model\n";
  if (fit.ok) {
    os << "  MEASURED here (fitted to the " << fit.points << " ring rows above, " << ranks
       << " ranks): T(S) = 2(n-1) * alpha + 2(n-1)/n * S * beta,\n"
       << "    least squares on relative error\n"
       << "    alpha = " << fmt(fit.alpha_s * 1e6, 2) << " us per step, beta = 1 / ("
       << fmt(1e-9 / fit.beta_s, 2) << " GB/s) per byte a rank sends; largest misfit "
       << fmt(fit.max_rel_err * 100, 0) << "% of a measured point\n";
    fit_json.add("alpha_us", fit.alpha_s * 1e6)
        .add("beta_gbs", 1e-9 / fit.beta_s)
        .add("max_rel_err", fit.max_rel_err);
  } else {
    os << "  MEASURED: no fit (" << fit.why << "); projections use the assumed alpha only\n";
    fit_json.add("alpha_us", std::nan("")).add("beta_gbs", std::nan("")).add("why", fit.why);
  }

  os << "  PROJECTED (the model, not measured): one allreduce of a " << fmt(o.bytes / 1e6, 0)
     << " MB gradient over N ranks, per-rank link bandwidth B\n"
     << "    ring: 2(N-1)*alpha + 2(N-1)/N * S/B (bandwidth-optimal; latency grows with N)\n"
     << "    tree: 2*log2(N)*alpha + 2*S/B (NCCL's double binary tree, pipelined: depth paid in\n"
     << "          latency only, each rank moves 2S; pipeline fill ignored)\n"
     << "    links: NVLink ~300 GB/s per direction per GPU (H100 class; past 8 GPUs only within\n"
     << "           an NVSwitch domain), InfiniBand NDR 400 Gb/s = 50 GB/s per GPU\n";

  struct Alpha {
    double seconds;
    const char* source;
    std::string label;
  };
  std::vector<Alpha> alphas = {{o.alpha_assumed_s, "assumed",
                                detail::str_cat("alpha = ", fmt(o.alpha_assumed_s * 1e6, 1),
                                                " us per step: an ASSUMPTION (typical of NCCL "
                                                "between GPUs), not measured")}};
  if (fit.ok)
    alphas.push_back(
        {fit.alpha_s, "measured",
         detail::str_cat("alpha = ", fmt(fit.alpha_s * 1e6, 2), " us per step: MEASURED here (",
                         o.measured_over, "), links as stated")});

  std::vector<std::string> rows_json;
  for (const Alpha& a : alphas) {
    os << "\n  " << a.label << "\n";
    std::vector<std::string> header = {"N"};
    for (const Link& l : kLinks) {
      header.push_back(detail::str_cat("ring ", l.name, " ms"));
      header.push_back(detail::str_cat("tree ", l.name, " ms"));
    }
    for (const Link& l : kLinks) header.push_back(detail::str_cat("faster on ", l.name));
    std::vector<std::vector<std::string>> rows;
    for (int n = o.min_ranks; n <= o.max_ranks; n *= 2) {
      std::vector<std::string> row = {std::to_string(n)};
      std::vector<std::string> faster;
      for (const Link& l : kLinks) {
        const double ring = ring_seconds(n, o.bytes, a.seconds, l.bytes_per_s);
        const double tree = tree_seconds(n, o.bytes, a.seconds, l.bytes_per_s);
        row.push_back(ms(ring));
        row.push_back(ms(tree));
        faster.push_back(ring <= tree ? "ring" : "tree");
        rows_json.push_back(JsonObject()
                                .add("ranks", n)
                                .add("alpha_us", a.seconds * 1e6)
                                .add("alpha", a.source)
                                .add("link", l.key)
                                .add("link_gbs", l.bytes_per_s / 1e9)
                                .add("ring_ms", ring * 1e3)
                                .add("tree_ms", tree * 1e3)
                                .str());
      }
      row.insert(row.end(), faster.begin(), faster.end());
      rows.push_back(std::move(row));
    }
    print_table(os, header, rows, "    ");
  }
  os << "  (the ring's bandwidth term 2(N-1)/N * S/B is a little below the tree's 2S/B, but its\n"
        "  latency term 2(N-1)*alpha grows linearly in N and the tree's logarithmically: the tree "
        "wins once\n"
        "  the ring's latency outgrows the bandwidth it saves)\n";

  std::vector<std::string> links_json;
  for (const Link& l : kLinks)
    links_json.push_back(
        JsonObject().add("link", l.key).add("gbs", l.bytes_per_s / 1e9).add("name", l.name).str());
  const std::string projection =
      JsonObject()
          .add("source", "projected (model, not measured)")
          .raw("bytes", int_json(static_cast<int64_t>(o.bytes)))
          .add("alpha_assumed_us", o.alpha_assumed_s * 1e6)
          .add("ring", "2(N-1)*alpha + 2(N-1)/N*S/B")
          .add("tree", "double binary tree, pipelined: 2*log2(N)*alpha + 2*S/B")
          .raw("links", json_array(links_json))
          .raw("rows", json_array(rows_json))
          .str();
  return JsonObject().raw("fit", fit_json.str()).raw("projection", projection).str();
}

}  // namespace stoke::bench
