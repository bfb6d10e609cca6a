// stoke-report: one self-contained HTML page with SVG charts of a stoke-train run, from its
// metrics.jsonl: loss per step (train) and per evaluation (test), accuracy, learning rate, data
// wait, and, when the run was profiled (--profile), the step breakdown as a stacked bar. No
// scripts, no external files: it opens in any browser. The page is well-formed XML (XHTML), and
// the series it draws are also embedded as JSON (<script type="application/json" id="series">) so
// that tools and tests can read them back.
//
//   stoke-report --metrics ckpt/metrics.jsonl --out report.html [--title NAME]
//
// metrics_reader.cpp reads the file; this file draws the page.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "metrics_reader.h"

namespace {

using stoke::report::Points;

struct Series {
  std::string name, color;
  Points points;
};

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                         "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// A line chart: x and y axes scaled to the data, min/max labels, one polyline per series (a dot
// per point when a series has few points) and a legend.
std::string line_chart(const std::string& title, const std::string& x_label,
                       const std::vector<Series>& series) {
  const double w = 560, h = 260, left = 60, right = 170, top = 30, bottom = 40;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w + left + right << "\" height=\""
    << h + top + bottom << "\" class=\"chart\">\n";
  o << "<text x=\"" << left << "\" y=\"18\" font-weight=\"bold\">" << xml_escape(title)
    << "</text>\n";
  if (!(x0 <= x1)) {
    o << "<text x=\"" << left << "\" y=\"" << top + h / 2 << "\">no data</text>\n</svg>\n";
    return o.str();
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * w; };
  auto py = [&](double y) { return top + h - (y - y0) / (y1 - y0) * h; };
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << w << "\" height=\"" << h
    << "\" fill=\"none\" stroke=\"#999\"/>\n";
  o << "<text x=\"" << left - 5 << "\" y=\"" << top + 5 << "\" text-anchor=\"end\">" << num(y1)
    << "</text>\n";
  o << "<text x=\"" << left - 5 << "\" y=\"" << top + h << "\" text-anchor=\"end\">" << num(y0)
    << "</text>\n";
  o << "<text x=\"" << left << "\" y=\"" << top + h + 16 << "\">" << num(x0) << "</text>\n";
  o << "<text x=\"" << left + w << "\" y=\"" << top + h + 16 << "\" text-anchor=\"end\">" << num(x1)
    << "</text>\n";
  o << "<text x=\"" << left + w / 2 << "\" y=\"" << top + h + 32 << "\" text-anchor=\"middle\">"
    << xml_escape(x_label) << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    o << "<polyline class=\"series\" data-name=\"" << xml_escape(s.name)
      << "\" fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.5\" points=\"";
    for (const auto& [x, y] : s.points) o << num(px(x)) << "," << num(py(y)) << " ";
    o << "\"/>\n";
    if (s.points.size() <= 60)
      for (const auto& [x, y] : s.points)
        o << "<circle cx=\"" << num(px(x)) << "\" cy=\"" << num(py(y)) << "\" r=\"2.5\" fill=\""
          << s.color << "\"/>\n";
    const double ly = top + 14 + 18 * static_cast<double>(i);
    o << "<rect x=\"" << left + w + 10 << "\" y=\"" << ly - 9
      << "\" width=\"10\" height=\"10\" fill=\"" << s.color << "\"/><text x=\"" << left + w + 24
      << "\" y=\"" << ly << "\">" << xml_escape(s.name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

// One horizontal bar, each phase a segment as wide as its share of the step.
std::string stacked_bar(const std::string& title,
                        const std::vector<std::pair<std::string, double>>& parts) {
  const double w = 560, left = 60;
  double total = 0;
  for (const auto& p : parts) total += p.second;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"750\" height=\"" << 80 + 18 * parts.size()
    << "\" class=\"chart\">\n";
  o << "<text x=\"" << left << "\" y=\"18\" font-weight=\"bold\">" << xml_escape(title)
    << "</text>\n";
  double x = left;
  for (size_t i = 0; i < parts.size(); ++i) {
    const double seg = total > 0 ? parts[i].second / total * w : 0;
    const char* color = kColors[i % 8];
    o << "<rect class=\"phase\" data-name=\"" << xml_escape(parts[i].first) << "\" x=\"" << num(x)
      << "\" y=\"30\" width=\"" << num(seg) << "\" height=\"24\" fill=\"" << color << "\"/>\n";
    o << "<rect x=\"" << left << "\" y=\"" << 64 + 18 * i << "\" width=\"10\" height=\"10\" fill=\""
      << color << "\"/><text x=\"" << left + 14 << "\" y=\"" << 73 + 18 * i << "\">"
      << xml_escape(parts[i].first) << ": " << num(parts[i].second) << " ms ("
      << num(total > 0 ? 100 * parts[i].second / total : 0) << " %)</text>\n";
    x += seg;
  }
  o << "</svg>\n";
  return o.str();
}

nlohmann::json points_json(const Points& p) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [x, y] : p) a.push_back({x, y});
  return a;
}

int usage(int code) {
  (code ? std::cerr : std::cout)
      << "usage: stoke-report --metrics FILE --out FILE.html [--title NAME]\n"
         "  FILE: a stoke-train metrics.jsonl (--metrics, or DIR/metrics.jsonl with "
         "--checkpoint)\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string metrics_path, out_path, title = "stoke-train run";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "stoke-report: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--metrics")
      metrics_path = value();
    else if (a == "--out")
      out_path = value();
    else if (a == "--title")
      title = value();
    else if (a == "--help")
      return usage(0);
    else {
      std::cerr << "stoke-report: unknown flag " << a << "\n";
      return usage(2);
    }
  }
  if (metrics_path.empty() || out_path.empty()) return usage(2);
  stoke::report::MetricsSeries m;
  int out_fd = -1;
  try {
    // --out is checked before the metrics are read: a FIFO would block the page's open() (a
    // writer waits for a reader), and the page written over its own metrics file would lose them.
    std::error_code ec1, ec2;
    const auto a = std::filesystem::weakly_canonical(metrics_path, ec1);
    const auto b = std::filesystem::weakly_canonical(out_path, ec2);
    STOKE_CHECK(ec1 || ec2 || a != b, "stoke-report", "--out ", out_path, " is --metrics ",
                metrics_path, ": the page would replace the metrics it is drawn from");
    stoke::check_output_path(out_path, "stoke-report", "--out");
    m = stoke::report::read_metrics(metrics_path, "--metrics");
    out_fd = stoke::open_output_file(out_path, O_TRUNC, "stoke-report", "--out");
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  const Points &step_loss = m.step_loss, &lr = m.lr, &wait_ms = m.wait_ms, &eval_loss = m.eval_loss,
               &eval_acc = m.eval_acc, &epoch_train_loss = m.epoch_train_loss,
               &epoch_test_loss = m.epoch_test_loss, &epoch_train_acc = m.epoch_train_acc,
               &epoch_test_acc = m.epoch_test_acc;
  const auto& phases = m.phases;
  const int64_t profiled_steps = m.profiled_steps;
  std::ostringstream body;
  body << line_chart("Loss per step", "optimizer step",
                     {{"train (step records)", kColors[0], step_loss},
                      {"test (evaluations)", kColors[1], eval_loss}});
  body << line_chart(
      "Loss per epoch", "epoch",
      {{"train", kColors[0], epoch_train_loss}, {"test", kColors[1], epoch_test_loss}});
  body << line_chart(
      "Accuracy (%)", "epoch",
      {{"train", kColors[0], epoch_train_acc}, {"test", kColors[1], epoch_test_acc}});
  body << line_chart("Learning rate", "optimizer step", {{"lr", kColors[2], lr}});
  body << line_chart("Data wait per step (ms)", "optimizer step",
                     {{"data wait", kColors[3], wait_ms}});
  if (!phases.empty())
    body << stacked_bar(
        "Step breakdown (ms per step, " + std::to_string(profiled_steps) + " profiled steps)",
        phases);
  if (m.comm_ms && m.exposed_comm_ms && std::isfinite(*m.comm_ms) &&
      std::isfinite(*m.exposed_comm_ms)) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "<p>Communication per step: collectives %.3f ms, of which the step waited for "
                  "%.3f ms (the rest overlapped the computation).</p>\n",
                  *m.comm_ms, *m.exposed_comm_ms);
    body << text;
  }
  nlohmann::json series = {{"step_loss", points_json(step_loss)},
                           {"eval_loss", points_json(eval_loss)},
                           {"eval_acc", points_json(eval_acc)},
                           {"epoch_train_loss", points_json(epoch_train_loss)},
                           {"epoch_test_loss", points_json(epoch_test_loss)},
                           {"epoch_train_acc", points_json(epoch_train_acc)},
                           {"epoch_test_acc", points_json(epoch_test_acc)},
                           {"lr", points_json(lr)},
                           {"data_wait_ms", points_json(wait_ms)}};
  nlohmann::json phase_json = nlohmann::json::object();
  for (const auto& [name, ms] : phases) phase_json[name] = ms;
  series["step_breakdown_ms"] = phase_json;
  // The JSON goes into a script element: "</" cannot end it early once escaped.
  std::string data = series.dump();
  for (size_t p = 0; (p = data.find("</", p)) != std::string::npos; p += 3)
    data.replace(p, 2, "<\\/");
  std::ostringstream page;
  page
      << "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\">\n<head><meta "
         "charset=\"utf-8\"/>"
      << "<title>" << xml_escape(title)
      << "</title>\n<style>body{font-family:sans-serif;margin:20px}"
      << " svg.chart{display:block;margin:12px 0} text{font-size:12px}</style></head>\n<body>\n<h1>"
      << xml_escape(title) << "</h1>\n<p>" << xml_escape(metrics_path) << ": " << step_loss.size()
      << " step records, " << eval_loss.size() << " evaluations, " << epoch_test_acc.size()
      << " epochs";
  if (m.missing > 0) page << " (" << m.missing << " values null or absent, not drawn)";
  page << "</p>\n"
       << body.str() << "<script type=\"application/json\" id=\"series\"><![CDATA[" << data
       << "]]></script>\n</body>\n</html>\n";
  const std::string text = page.str();
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(out_fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::cerr << "stoke-report: cannot write " << out_path << ": "
                << std::strerror(n < 0 ? errno : ENOSPC) << "\n";
      ::close(out_fd);
      return 1;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(out_fd) != 0) {
    std::cerr << "stoke-report: cannot write " << out_path << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  std::cout << "stoke-report: wrote " << out_path << "\n";
  return 0;
}
