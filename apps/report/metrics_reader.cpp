#include "metrics_reader.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/files.h"

namespace stoke::report {
namespace {

using Record = nlohmann::ordered_json;  // keeps the phases in the order stoke-train wrote them

constexpr const char* kOp = "stoke-report";

// One record of the file, for values and errors.
struct Line {
  const Record& r;
  const std::string& path;
  int64_t number;

  [[noreturn]] void fail(const std::string& what) const {
    STOKE_FAIL(kOp, path, ":", number, ": ", what);
  }

  // The number under `key`; nothing when it is absent or null (stoke-train's non-finite value).
  std::optional<double> number_at(const char* key) const {
    const auto it = r.find(key);
    if (it == r.end() || it->is_null()) return std::nullopt;
    if (!it->is_number())
      fail(std::string("\"") + key + "\" is a JSON " + it->type_name() + " (" + it->dump() +
           "), expected a number or null");
    return it->get<double>();
  }
};

// A point (x, y) when both values are there and finite; counted as missing otherwise.
void add(Points& points, std::optional<double> x, std::optional<double> y, MetricsSeries& out) {
  if (x && y && std::isfinite(*x) && std::isfinite(*y))
    points.emplace_back(*x, *y);
  else
    ++out.missing;
}

void read_record(const Line& line, MetricsSeries& out) {
  const Record& r = line.r;
  if (!r.is_object()) line.fail(std::string("a JSON ") + r.type_name() + ", expected an object");
  const auto type_it = r.find("type");
  if (type_it == r.end() || !type_it->is_string()) line.fail("no string \"type\"");
  const std::string& type = type_it->get_ref<const std::string&>();
  const auto step = line.number_at("step");
  if (type == "step") {
    add(out.step_loss, step, line.number_at("loss"), out);
    add(out.lr, step, line.number_at("lr"), out);
    const auto wait = line.number_at("data_wait_s");
    add(out.wait_ms, step, wait ? std::optional<double>(1e3 * *wait) : std::nullopt, out);
  } else if (type == "eval") {
    add(out.eval_loss, step, line.number_at("test_loss"), out);
    add(out.eval_acc, step, line.number_at("test_acc"), out);
  } else if (type == "epoch") {
    const auto epoch = line.number_at("epoch");
    add(out.epoch_train_loss, epoch, line.number_at("train_loss"), out);
    add(out.epoch_test_loss, epoch, line.number_at("test_loss"), out);
    add(out.epoch_train_acc, epoch, line.number_at("train_acc"), out);
    add(out.epoch_test_acc, epoch, line.number_at("test_acc"), out);
  } else if (type == "profile") {
    const auto steps = line.number_at("steps");
    const auto phases = r.find("phase_ms");
    if (phases == r.end() || phases->is_null()) {
      ++out.missing;
      return;
    }
    if (!phases->is_object())
      line.fail(std::string("\"phase_ms\" is a JSON ") + phases->type_name() +
                ", expected an object of numbers");
    out.phases.clear();
    out.comm_ms = line.number_at("comm_ms");
    out.exposed_comm_ms = line.number_at("exposed_comm_ms");
    out.profiled_steps = steps && *steps >= 0 && *steps < 1e15 ? static_cast<int64_t>(*steps) : 0;
    for (const auto& [name, ms] : phases->items()) {
      if (ms.is_null()) {
        ++out.missing;
        continue;
      }
      if (!ms.is_number())
        line.fail("\"phase_ms\" \"" + name + "\" is a JSON " + ms.type_name() +
                  ", expected a number or null");
      const double v = ms.get<double>();
      if (std::isfinite(v))
        out.phases.emplace_back(name, v);
      else
        ++out.missing;
    }
  }
  // Other types: a newer stoke-train's records, not drawn.
}

}  // namespace

MetricsSeries parse_metrics(const std::string& text, const std::string& path) {
  MetricsSeries out;
  int64_t number = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++number;
    if (line.empty()) continue;
    // stoke-train's records nest two levels (a record, its "phase_ms"): deeper nesting is
    // refused while parsing, which bounds the parser's work and memory on a hostile file.
    struct TooDeep {};
    const Record::parser_callback_t shallow = [](int depth, Record::parse_event_t event, Record&) {
      if (depth > 4 && (event == Record::parse_event_t::object_start ||
                        event == Record::parse_event_t::array_start))
        throw TooDeep{};
      return true;
    };
    Record r;
    try {
      r = Record::parse(line, shallow);
    } catch (const nlohmann::json::exception& e) {
      STOKE_FAIL(kOp, path, ":", number, ": not JSON (", e.what(), ")");
    } catch (const TooDeep&) {
      STOKE_FAIL(kOp, path, ":", number, ": nested deeper than a stoke-train record can be");
    }
    read_record(Line{r, path, number}, out);
  }
  return out;
}

MetricsSeries read_metrics(const std::string& path, const std::string& what) {
  return parse_metrics(read_regular_file(path, kOp, what), path);
}

}  // namespace stoke::report
