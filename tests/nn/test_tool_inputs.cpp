// stoke-report, stoke-pack and stoke-logits against what the second hostile pass gave them
// (issue 39): valid JSON of an unexpected type (stoke-report aborted on an uncaught type_error,
// "loss":null included, which stoke-train itself writes for a non-finite value), FIFOs where a
// file goes (they hung), a 2.8 MB IDX .gz that expanded to 2.9 GB of RSS with --limit 100, images
// of another size that the help said were resized, and a diverged checkpoint whose logits came
// out as a bare nan (not JSON) with exit 0. (The .gz's memory: idx_limit_check.py.)
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/checkpoint/safetensors.h"
#include "stoke/stoke.h"
#include "support/process.h"
#include "support/temp_dir.h"

using namespace stoke;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

test::ProcessResult run(const char* exe, const std::string& args, unsigned deadline_s = 60) {
  return test::run_process("exec " + std::string(exe) + " " + args, deadline_s);
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

void be32(std::string& s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xff);
}

// A gzip member holding `bytes` (members concatenated are one gzip stream, as gzip -d reads it).
std::string gzip_member(const std::string& bytes) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, bytes.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// MNIST-style files in `dir` whose images file declares `n` h x w images, gzipped. Black images:
// one MiB of zeros compresses to ~1 KiB, so the files are small whatever they declare; `noisy`
// ones hardly compress. `held` images are really there (the stream ends early when held < n).
void write_idx_gz(const fs::path& dir, const std::string& prefix, uint32_t n, uint32_t held,
                  uint32_t h, uint32_t w, bool noisy = false) {
  std::string header;
  be32(header, 0x803);
  be32(header, n);
  be32(header, h);
  be32(header, w);
  std::string images = gzip_member(header);
  const uint64_t total = uint64_t{held} * h * w;
  if (noisy) {
    std::string px(total, '\0');
    uint32_t seed = 1;
    for (char& c : px) c = static_cast<char>((seed = seed * 1664525u + 1013904223u) >> 24);
    images += gzip_member(px);
  } else {
    const std::string mib = gzip_member(std::string(1 << 20, '\0'));
    for (uint64_t done = 0; done + (1 << 20) <= total; done += 1 << 20) images += mib;
    images += gzip_member(std::string(total % (1 << 20), '\0'));
  }
  write_file(dir / (prefix + "-images-idx3-ubyte.gz"), images);
  std::string labels;
  be32(labels, 0x801);
  be32(labels, n);
  for (uint32_t i = 0; i < n; ++i) labels += static_cast<char>(i % 10);
  write_file(dir / (prefix + "-labels-idx1-ubyte"), labels);
}

}  // namespace

TEST_CASE("stoke-report: valid JSON of an unexpected type is named, never an abort",
          "[nn][report]") {
  const test::TempDir tmp("stoke-report-types");
  const fs::path m = tmp.path / "metrics.jsonl", page = tmp.path / "page.html";
  const std::string step = R"({"type":"step","epoch":1,"step":1,"loss":2.5,"lr":0.1,)"
                           R"("data_wait_s":0.001})";
  // null (stoke-train's non-finite value) and absent values draw no point; the page is written.
  write_file(m, step + "\n" +
                    R"({"type":"step","epoch":1,"step":2,"loss":null,"lr":0.1,"data_wait_s":0})" +
                    "\n" + R"({"type":"epoch","epoch":1,"step":2,"train_loss":null})" + "\n" +
                    R"({"type":"note","text":"a newer record type"})" + "\n");
  const test::ProcessResult ok =
      run(STOKE_REPORT_EXE, "--metrics " + m.string() + " --out " + page.string());
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.output, Contains("wrote " + page.string()));
  std::ifstream in(page);
  const std::string html{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  // One step point (the null loss draws none); the null and the four absent epoch values.
  CHECK_THAT(html, Contains("1 step records") && Contains("(5 values null or absent, not drawn)"));
  CHECK_THAT(html, !Contains("nan") && !Contains("NaN"));

  struct Bad {
    std::string line, says;
  };
  for (const Bad& b : {
           Bad{R"({"type":"step","step":"3","loss":1})",
               "\"step\" is a JSON string (\"3\"), expected a number or null"},
           Bad{R"({"type":"step","step":3,"loss":[1]})", "\"loss\" is a JSON array"},
           Bad{R"({"type":"eval","step":3,"test_acc":{"a":1}})", "\"test_acc\" is a JSON object"},
           Bad{R"({"type":"profile","steps":3,"phase_ms":[1,2]})",
               "\"phase_ms\" is a JSON array, expected an object of numbers"},
           Bad{R"({"type":"profile","steps":3,"phase_ms":{"forward":"x"}})",
               "\"phase_ms\" \"forward\" is a JSON string"},
           Bad{R"({"type":7})", "no string \"type\""},
           Bad{R"([1,2])", "a JSON array, expected an object"},
           Bad{"3", "a JSON number, expected an object"},
           Bad{"null", "a JSON null, expected an object"},
           Bad{std::string(100, '[') + std::string(100, ']'), "nested deeper"},
       }) {
    write_file(m, step + "\n" + b.line + "\n");
    const test::ProcessResult r =
        run(STOKE_REPORT_EXE, "--metrics " + m.string() + " --out " + page.string());
    INFO(b.line << "\n" << r.output);
    CHECK(r.signal == 0);  // SIGABRT on an uncaught nlohmann::json::type_error before
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(m.string() + ":2: " + b.says));
  }
}

TEST_CASE("stoke-report and stoke-pack: a FIFO where a file goes is refused at once",
          "[nn][report][pack][files]") {
  const test::TempDir tmp("stoke-tools-fifo");
  const fs::path fifo = tmp.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const fs::path m = tmp.path / "metrics.jsonl";
  write_file(m, R"({"type":"step","epoch":1,"step":1,"loss":2.5,"lr":0.1,"data_wait_s":0})"
                "\n");
  struct Case {
    const char* exe;
    std::string args, says;
  };
  const std::string f = fifo.string();
  // CIFAR-10's test split of one record, with a FIFO for its class names file.
  const fs::path cifar = tmp.path / "cifar";
  fs::create_directories(cifar);
  write_file(cifar / "test_batch.bin", std::string(1 + 3072, '\x01'));
  REQUIRE(::mkfifo((cifar / "batches.meta.txt").c_str(), 0600) == 0);
  const std::string pack_in = " --format cifar10 --split test --input " + cifar.string();
  for (const Case& c : {
           Case{STOKE_REPORT_EXE, "--metrics " + f + " --out " + (tmp.path / "p.html").string(),
                "--metrics " + f + ": is a FIFO (named pipe), not a regular file"},
           Case{STOKE_REPORT_EXE, "--metrics " + m.string() + " --out " + f,
                "--out " + f + ": is a FIFO (named pipe), not a regular file"},
           Case{STOKE_REPORT_EXE, "--metrics " + m.string() + " --out " + tmp.path.string(),
                "--out " + tmp.path.string() + ": is a directory"},
           Case{STOKE_REPORT_EXE, "--metrics " + m.string() + " --out " + m.string(),
                "the page would replace the metrics it is drawn from"},
           Case{STOKE_PACK_EXE, pack_in + " --output " + (tmp.path / "out").string(),
                (cifar / "batches.meta.txt").string() + "': not a regular file"},
           Case{STOKE_PACK_EXE, pack_in + " --output " + m.string(),
                "--output " + m.string() + ": exists and is not a directory"},
           Case{STOKE_PACK_EXE, pack_in + " --export-png " + f,
                "--export-png " + f + ": exists and is not a directory"},
       }) {
    const test::ProcessResult r = run(c.exe, c.args, 30);
    INFO(c.args << "\n" << r.output);
    CHECK_FALSE(r.timed_out());
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(c.says));
  }
  // Nothing was written over the metrics.
  std::ifstream in(m);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}).rfind("{\"type\":\"step\"", 0) == 0);
}

TEST_CASE("stoke-pack --limit: an IDX .gz that holds fewer images than declared fails early",
          "[nn][pack]") {
  // (How much memory --limit takes: idx_limit_check.py, which can read a child's peak RSS.)
  const test::TempDir tmp("stoke-pack-limit");
  const std::string args = "--format idx --input " + tmp.path.string() + " --limit 100 --output " +
                           (tmp.path / "packed").string();
  // A stream that declares more than its compressed bytes can hold fails before anything is
  // inflated (deflate's best ratio is 1032:1)...
  write_idx_gz(tmp.path, "train", 10000, 50, 224, 224);
  const test::ProcessResult liar = run(STOKE_PACK_EXE, args);
  INFO(liar.output);
  CHECK(liar.exit_code == 1);
  CHECK_THAT(liar.output, Contains("which need 501760000 data bytes, but the") &&
                              Contains("compressed bytes left can hold at most"));
  // ... and one that could hold them but ends before the limit's images, after inflating only
  // what is there.
  write_idx_gz(tmp.path, "train", 10000, 50, 28, 28, /*noisy=*/true);
  const test::ProcessResult short_stream = run(STOKE_PACK_EXE, args);
  INFO(short_stream.output);
  CHECK(short_stream.exit_code == 1);
  CHECK_THAT(short_stream.output,
             Contains("truncated data: the first 100 entries of the header's dims [10000, 28, "
                      "28] need 78400 data bytes") &&
                 Contains("only 39200 are present"));
}

TEST_CASE("stoke-pack: --help and the error for an image of another size both name --size",
          "[nn][pack]") {
  const test::ProcessResult help = run(STOKE_PACK_EXE, "--help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Contains("--size HxW       resize every image to H x W, H and W each "
                                   "in [1, 8192]") &&
                              Contains("an image of another size is refused"));
  CHECK_THAT(help.output, !Contains("other sizes are resized"));
  // Every numeric flag's range is in the help as the parser enforces it.
  for (const auto& [flag, range] :
       std::vector<std::pair<std::string, std::string>>{{"--limit", "[0, 1099511627776]"},
                                                        {"--shard-mb", "[1, 1048576]"},
                                                        {"--channels", "[0, 4]"},
                                                        {"--threads", "[0, 1024]"}}) {
    CHECK_THAT(help.output, Contains(range));
    const test::ProcessResult r =
        run(STOKE_PACK_EXE, "--format folder --input x --output y " + flag + " 99999999999999");
    CHECK_THAT(r.output, Contains(flag + ": expected an integer in " + range));
  }
  // A folder of one 4x4 and one 6x6 image: refused without --size, naming it; packed with it.
  const test::TempDir tmp("stoke-pack-sizes");
  fs::create_directories(tmp.path / "in" / "a");
  const auto png = [](int side) {
    const std::vector<uint8_t> px(static_cast<size_t>(side * side), 128);
    const std::vector<uint8_t> bytes = data::encode_png(px.data(), side, side, 1);
    return std::string(bytes.begin(), bytes.end());
  };
  write_file(tmp.path / "in" / "a" / "0.png", png(4));
  write_file(tmp.path / "in" / "a" / "1.png", png(6));
  const std::string args = "--format folder --input " + (tmp.path / "in").string() + " --output " +
                           (tmp.path / "out").string();
  const test::ProcessResult refused = run(STOKE_PACK_EXE, args);
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output, Contains("a 6x6 image, but the records are 4x4 (the first sample's "
                                      "size) and no resize was asked for: pass --size HxW"));
  CHECK(run(STOKE_PACK_EXE, args + " --size 4x4").exit_code == 0);
}

TEST_CASE("stoke-logits: non-finite weights are an error, never a bare nan", "[nn][logits]") {
  const test::TempDir tmp("stoke-logits-nan");
  const fs::path good = tmp.path / "ckpt";
  REQUIRE(test::run_process("exec " + std::string(STOKE_TRAIN_EXE) +
                            " --epochs 1 --limit-train 256 --limit-test 64 --no-progress "
                            "--checkpoint " +
                            good.string())
              .exit_code == 0);
  nn::SafetensorsFile f = nn::load_safetensors((good / "best.safetensors").string());
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    nn::SafetensorsFile g = f;
    for (auto& [name, t] : g.tensors)
      if (name == "fc3.bias") {
        t = t.clone();
        t.data<float>()[3] = bad;
      }
    const fs::path w = tmp.path / "bad.safetensors";
    nn::save_safetensors(w.string(), g.tensors, g.metadata);
    const test::ProcessResult r = run(STOKE_LOGITS_EXE, "--weights " + w.string() + " --count 4");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(w.string() + ": tensor 'fc3.bias' is not finite (element 3 is " +
                                  (std::isnan(bad) ? "nan" : "inf") + ")"));
    CHECK_THAT(r.output, !Contains("\"logits\""));
  }
  // Finite weights whose logits overflow f32 (two layers scaled by 1e30): named too.
  nn::SafetensorsFile big = f;
  for (auto& [name, t] : big.tensors)
    if (name == "fc2.weight" || name == "fc3.weight") t = t * 1e30;
  const fs::path w = tmp.path / "big.safetensors";
  nn::save_safetensors(w.string(), big.tensors, big.metadata);
  const test::ProcessResult r = run(STOKE_LOGITS_EXE, "--weights " + w.string() + " --count 4");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("are not finite") && Contains("no logits printed"));
  const test::ProcessResult help = run(STOKE_LOGITS_EXE, "--help");
  CHECK_THAT(help.output, Contains("N in [1, 10000]"));
}
