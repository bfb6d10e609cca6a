// A FIFO (named pipe) where a file is expected: every reader refuses it at once, naming the path,
// instead of blocking in open() until a writer appears (it hung before), and so does every writer
// (core/files.h: open() for writing blocks until a reader appears). Each call runs on its own
// thread with a deadline, so a regression fails here rather than hanging the suite.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/files.h"
#include "core/profiler.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/idx_dataset.h"
#include "data/image_decode.h"
#include "data/packed.h"
#include "nn/checkpoint/safetensors.h"
#include "stoke/stoke.h"
#include "support/temp_dir.h"

using namespace stoke;

namespace {

// The error `call` throws, or what it did instead: returned, or still blocked after 20 s (the
// thread is detached, so a blocked open() fails the test without hanging the process's exit).
std::string error_within_deadline(std::function<void()> call) {
  std::packaged_task<std::string()> task([call] {
    try {
      call();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("returned without an error");
  });
  std::future<std::string> result = task.get_future();
  std::thread(std::move(task)).detach();
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready)
    return "still blocked after 20 s";
  return result.get();
}

std::string make_fifo(const test::TempDir& dir, const std::string& name) {
  const std::string path = (dir.path / name).string();
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  return path;
}

}  // namespace

TEST_CASE("a FIFO given as a checkpoint, IDX file or image is refused at once", "[data][fifo]") {
  test::TempDir dir("stoke_test_fifo");
  const std::string ckpt = make_fifo(dir, "model.safetensors");
  CHECK_THAT(error_within_deadline([&] { nn::load_safetensors(ckpt); }),
             Catch::Contains(ckpt) && Catch::Contains("not a regular file"));
  const std::string idx = make_fifo(dir, "train-images-idx3-ubyte");
  CHECK_THAT(error_within_deadline([&] { data::read_idx(idx); }),
             Catch::Contains(idx) && Catch::Contains("not a regular file"));
  const std::string image = make_fifo(dir, "cat.png");
  CHECK_THAT(error_within_deadline([&] {
               std::vector<uint8_t> bytes;
               data::read_file_bytes(image, bytes);
             }),
             Catch::Contains(image) && Catch::Contains("not a regular file"));
}

TEST_CASE("a FIFO in place of a packed shard is refused at once", "[data][fifo]") {
  test::TempDir dir("stoke_test_fifo_packed");
  Tensor images = zeros({8, 4, 4}, {.dtype = DType::u8});
  const auto src = std::make_shared<data::IdxImageDataset>(
      images, zeros({8}, {.dtype = DType::i64}), "mem", std::vector<std::string>{"a"});
  const std::string out = (dir.path / "p").string();
  data::pack_dataset(*src, out);
  const std::string shard = data::packed_shard_path(out, 0);
  std::filesystem::remove(shard);
  REQUIRE(::mkfifo(shard.c_str(), 0600) == 0);
  CHECK_THAT(error_within_deadline([&] { data::PackedDataset packed(out); }),
             Catch::Contains(shard) && Catch::Contains("not a regular file"));
}

TEST_CASE("a FIFO in place of CIFAR's class names file is refused at once", "[data][fifo]") {
  test::TempDir dir("stoke_test_fifo_cifar");
  {
    std::FILE* f = std::fopen(dir.file("test_batch.bin").c_str(), "wb");
    REQUIRE(f != nullptr);
    const std::vector<char> record(1 + 3072, 1);
    REQUIRE(std::fwrite(record.data(), 1, record.size(), f) == record.size());
    std::fclose(f);
  }
  const std::string names = make_fifo(dir, "batches.meta.txt");
  CHECK_THAT(
      error_within_deadline([&] { data::CifarDataset ds(dir.path.string(), {.train = false}); }),
      Catch::Contains(names) && Catch::Contains("not a regular file"));
}

TEST_CASE("a FIFO given as an output file is refused at once", "[data][fifo]") {
  test::TempDir dir("stoke_test_fifo_out");
  const std::string out = make_fifo(dir, "out.json");
  CHECK_THAT(error_within_deadline([&] { profiler::write_chrome_trace(out); }),
             Catch::Contains(out) && Catch::Contains("is a FIFO (named pipe), not a regular file"));
  CHECK_THAT(error_within_deadline([&] { open_output_file(out, 0, "test", "--out"); }),
             Catch::Contains("--out " + out + ": is a FIFO (named pipe)"));
  CHECK_THAT(error_within_deadline([&] { read_regular_file(out, "test", "--in"); }),
             Catch::Contains("--in " + out + ": is a FIFO (named pipe)"));
  CHECK_THAT(
      error_within_deadline([&] { open_output_file(dir.path.string(), 0, "test", "--out"); }),
      Catch::Contains("is a directory"));
  // A FIFO left at the temporary name of an atomic write (a checkpoint, a packed shard or PNG).
  const std::string ckpt = dir.file("w.safetensors");
  make_fifo(dir, "w.safetensors.tmp." + std::to_string(::getpid()));
  CHECK_THAT(error_within_deadline([&] { nn::save_safetensors(ckpt, {{"a", ones({2})}}); }),
             Catch::Contains(ckpt) && Catch::Contains("is a FIFO (named pipe)"));
  const std::string png = dir.file("w.png");
  make_fifo(dir, "w.png.tmp" + std::to_string(::getpid()));
  CHECK_THAT(error_within_deadline([&] {
               const uint8_t byte = 0;
               data::write_file_atomic(png, &byte, 1);
             }),
             Catch::Contains(png) && Catch::Contains("is a FIFO (named pipe)"));
  // A regular file and a character device are taken.
  const int fd = open_output_file(dir.file("plain.txt"), O_TRUNC, "test", "--out");
  CHECK(fd >= 0);
  ::close(fd);
  const int null_fd = open_output_file("/dev/null", 0, "test", "--out");
  CHECK(null_fd >= 0);
  ::close(null_fd);
}
