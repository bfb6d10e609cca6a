// cuda/emu's NCCL subset (cuda/emu/nccl.h): ranks are std::threads on devices rank % 2. Collectives
// against closed forms in both stream modes, grouped send/recv, stream order, abort, init errors
// and error texts. Catch2's assertions are not thread-safe: rank threads only compute and record,
// the test thread checks.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "cuda/compat.h"
#include "cuda/nccl_compat.h"

namespace {

using Bytes = std::vector<unsigned char>;

__global__ void nccl_test_fill(float* p, int n, float v) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = v;
}

__global__ void nccl_test_add(float* p, int n, float v) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] += v;
}

// Sets the emulator's stream mode for a scope.
struct StreamMode {
  explicit StreamMode(bool deferred) : was(stoke::emu::set_deferred_streams(deferred)) {}
  ~StreamMode() { stoke::emu::set_deferred_streams(was); }
  bool was;
};

// Runs fn(rank) on n threads, each with device rank % 2 current.
void run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&fn, r] {
      cudaSetDevice(r % 2);
      fn(r);
    });
  for (std::thread& t : threads) t.join();
}

// A mutex/condition-variable barrier (visible to ThreadSanitizer).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock lock(m_);
    const int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};

struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t bytes) { cudaMalloc(&p, bytes == 0 ? 1 : bytes); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  unsigned char* bytes() const { return static_cast<unsigned char*>(p); }
  void* p = nullptr;
};

std::size_t size_of(ncclDataType_t t) {
  return t == ncclFloat64 ? 8 : t == ncclFloat32 ? 4 : 2;
}

// Rounds v (exactly representable in the accumulation type) to the element type.
Bytes encode(ncclDataType_t t, const std::vector<double>& v) {
  Bytes out(v.size() * size_of(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    unsigned char* p = out.data() + i * size_of(t);
    if (t == ncclFloat64) {
      std::memcpy(p, &v[i], 8);
    } else if (t == ncclFloat32) {
      const auto f = static_cast<float>(v[i]);
      std::memcpy(p, &f, 4);
    } else if (t == ncclFloat16) {
      const __half h = __float2half_rn(static_cast<float>(v[i]));
      std::memcpy(p, &h, 2);
    } else {
      const __nv_bfloat16 h = __float2bfloat16_rn(static_cast<float>(v[i]));
      std::memcpy(p, &h, 2);
    }
  }
  return out;
}

// Rank r's element i: exact in every type here, and so are the sums over up to 4 ranks.
double input(int r, std::size_t i) {
  return r + 1 + 0.5 * static_cast<double>(i % 16);
}

// The closed form of the allreduce over n ranks: sum = n(n+1)/2 + n * 0.5 (i % 16) (exact), avg =
// that sum divided in the accumulation type (f32 for f16/bf16/f32, f64 for f64) and rounded once.
Bytes expected(ncclDataType_t t, ncclRedOp_t op, int n, std::size_t count) {
  std::vector<double> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double sum = n * (n + 1) / 2.0 + n * 0.5 * static_cast<double>(i % 16);
    if (op == ncclSum) {
      v[i] = sum;
    } else if (op == ncclMax) {
      v[i] = input(n - 1, i);
    } else if (t == ncclFloat64) {
      v[i] = sum / n;
    } else {
      v[i] = static_cast<double>(static_cast<float>(sum) / static_cast<float>(n));
    }
  }
  return encode(t, v);
}

Bytes read_back(const void* d, std::size_t bytes, cudaStream_t s) {
  Bytes h(bytes);
  if (bytes > 0) cudaMemcpyAsync(h.data(), d, bytes, cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  return h;
}

ncclComm_t join(int n, const ncclUniqueId& id, int rank) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return nullptr;
  return comm;
}

ncclUniqueId fresh_id() {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  return id;
}

struct Case {
  ncclDataType_t type;
  ncclRedOp_t op;
  std::size_t count;
  bool in_place;
};

std::vector<Case> allreduce_cases() {
  std::vector<Case> cases;
  for (ncclDataType_t t : {ncclFloat32, ncclFloat64, ncclFloat16, ncclBfloat16})
    for (ncclRedOp_t op : {ncclSum, ncclAvg, ncclMax})
      for (std::size_t count : {0, 1, 7, 1000})
        for (bool in_place : {false, true}) cases.push_back({t, op, count, in_place});
  return cases;
}

}  // namespace

TEST_CASE("emu nccl: allreduce sum/avg/max x f32/f64/f16/bf16 matches the closed form on 1-4 ranks",
          "[nccl]") {
  const std::vector<Case> cases = allreduce_cases();
  for (bool deferred : {false, true}) {
    const StreamMode mode(deferred);
    for (int n = 1; n <= 4; ++n) {
      const ncclUniqueId id = fresh_id();
      std::vector<std::vector<Bytes>> got(n, std::vector<Bytes>(cases.size()));
      std::vector<std::vector<ncclResult_t>> rc(n, std::vector<ncclResult_t>(cases.size()));
      std::vector<int> device(n, -1), count(n, -1), user_rank(n, -1);
      run_ranks(n, [&](int r) {
        ncclComm_t comm = join(n, id, r);
        if (comm == nullptr) return;
        ncclCommCuDevice(comm, &device[r]);
        ncclCommCount(comm, &count[r]);
        ncclCommUserRank(comm, &user_rank[r]);
        cudaStream_t s = nullptr;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        const DeviceBuffer send(8000), recv(8000);
        for (std::size_t k = 0; k < cases.size(); ++k) {
          const Case& c = cases[k];
          std::vector<double> in(c.count);
          for (std::size_t i = 0; i < c.count; ++i) in[i] = input(r, i);
          const Bytes host = encode(c.type, in);
          void* src = c.in_place ? recv.p : send.p;
          // Queued on s (deferred mode): the allreduce must run it first.
          if (!host.empty())
            cudaMemcpyAsync(src, host.data(), host.size(), cudaMemcpyHostToDevice, s);
          rc[r][k] = ncclAllReduce(src, recv.p, c.count, c.type, c.op, comm, s);
          got[r][k] = read_back(recv.p, host.size(), s);
        }
        cudaStreamDestroy(s);
        ncclCommDestroy(comm);
      });
      for (int r = 0; r < n; ++r) {
        INFO("deferred " << deferred << ", " << n << " ranks, rank " << r);
        CHECK(device[r] == r % 2);
        CHECK(count[r] == n);
        CHECK(user_rank[r] == r);
        for (std::size_t k = 0; k < cases.size(); ++k) {
          const Case& c = cases[k];
          INFO("datatype " << c.type << ", op " << c.op << ", count " << c.count << ", in place "
                           << c.in_place);
          CHECK(rc[r][k] == ncclSuccess);
          CHECK(got[r][k] == expected(c.type, c.op, n, c.count));
        }
      }
    }
  }
}

TEST_CASE("emu nccl: reduce_scatter and allgather blocks, in and out of place, and integer ops",
          "[nccl]") {
  for (bool deferred : {false, true}) {
    const StreamMode mode(deferred);
    for (int n = 1; n <= 4; ++n) {
      const ncclUniqueId id = fresh_id();
      const std::vector<std::size_t> counts = {0, 1, 7, 1000};
      // Per rank: for each count and place, the reduce_scatter block and the allgather result.
      std::vector<std::vector<std::vector<float>>> rs(n), ag(n);
      std::vector<std::vector<std::int32_t>> ints(n);
      std::vector<int> failures(n, 0);
      run_ranks(n, [&](int r) {
        ncclComm_t comm = join(n, id, r);
        if (comm == nullptr) return;
        cudaStream_t s = nullptr;
        cudaStreamCreate(&s);
        const std::size_t max = 1000 * static_cast<std::size_t>(n) * sizeof(float);
        const DeviceBuffer a(max), b(max);
        for (bool in_place : {false, true})
          for (std::size_t count : counts) {
            // reduce_scatter: rank r holds x[j] = r + 1 + j over n * count elements.
            std::vector<float> x(count * n);
            for (std::size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(r + 1 + j);
            const std::size_t block = count * sizeof(float);
            if (!x.empty()) cudaMemcpy(a.p, x.data(), block * n, cudaMemcpyHostToDevice);
            float* out = in_place ? reinterpret_cast<float*>(a.bytes() + r * block)
                                  : static_cast<float*>(b.p);
            failures[r] +=
                ncclReduceScatter(a.p, out, count, ncclFloat32, ncclSum, comm, s) != ncclSuccess;
            Bytes got = read_back(out, block, s);
            rs[r].emplace_back(count);
            if (block > 0) std::memcpy(rs[r].back().data(), got.data(), block);
            // allgather: rank r contributes count copies of 100 r + i.
            std::vector<float> mine(count);
            for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(100 * r + i);
            float* gathered = static_cast<float*>(b.p);
            float* src = in_place ? reinterpret_cast<float*>(b.bytes() + r * block)
                                  : static_cast<float*>(a.p);
            if (block > 0) cudaMemcpy(src, mine.data(), block, cudaMemcpyHostToDevice);
            failures[r] += ncclAllGather(src, gathered, count, ncclFloat32, comm, s) != ncclSuccess;
            got = read_back(gathered, block * n, s);
            ag[r].emplace_back(count * n);
            if (block > 0) std::memcpy(ag[r].back().data(), got.data(), block * n);
          }
        // Integers: int32 prod and min of (r + 2), uint8 sum wrapping past 255.
        const std::int32_t v = r + 2;
        cudaMemcpy(a.p, &v, 4, cudaMemcpyHostToDevice);
        failures[r] += ncclAllReduce(a.p, b.p, 1, ncclInt32, ncclProd, comm, s) != ncclSuccess;
        failures[r] +=
            ncclAllReduce(a.p, b.bytes() + 4, 1, ncclInt32, ncclMin, comm, s) != ncclSuccess;
        const std::uint8_t u = 200;
        cudaMemcpy(a.p, &u, 1, cudaMemcpyHostToDevice);
        failures[r] +=
            ncclAllReduce(a.p, b.bytes() + 8, 1, ncclUint8, ncclSum, comm, s) != ncclSuccess;
        const Bytes got = read_back(b.p, 12, s);
        ints[r].resize(3);
        std::memcpy(ints[r].data(), got.data(), 8);
        ints[r][2] = got[8];
        cudaStreamDestroy(s);
        ncclCommDestroy(comm);
      });
      for (int r = 0; r < n; ++r) {
        INFO("deferred " << deferred << ", " << n << " ranks, rank " << r);
        CHECK(failures[r] == 0);
        REQUIRE(rs[r].size() == 2 * counts.size());
        for (std::size_t k = 0; k < rs[r].size(); ++k) {
          const std::size_t count = counts[k % counts.size()];
          for (std::size_t i = 0; i < count; ++i) {
            // sum over ranks q of (q + 1 + r count + i) = n(n+1)/2 + n (r count + i).
            const double want = n * (n + 1) / 2.0 + n * static_cast<double>(r * count + i);
            REQUIRE(rs[r][k][i] == static_cast<float>(want));
          }
          for (std::size_t i = 0; i < count * n; ++i)
            REQUIRE(ag[r][k][i] == static_cast<float>(100 * (i / count) + i % count));
        }
        std::int32_t prod = 1;
        for (int q = 0; q < n; ++q) prod *= q + 2;
        CHECK(ints[r][0] == prod);
        CHECK(ints[r][1] == 2);
        CHECK(ints[r][2] == (200 * n) % 256);
      }
    }
  }
}

TEST_CASE("emu nccl: broadcast from every root, in and out of place", "[nccl]") {
  for (bool deferred : {false, true}) {
    const StreamMode mode(deferred);
    for (int n : {1, 3, 4}) {
      const ncclUniqueId id = fresh_id();
      std::vector<std::vector<double>> got(n);  // per rank: root, place, element
      std::vector<int> failures(n, 0);
      run_ranks(n, [&](int r) {
        ncclComm_t comm = join(n, id, r);
        if (comm == nullptr) return;
        const DeviceBuffer a(7 * 8), b(7 * 8);
        for (int root = 0; root < n; ++root)
          for (bool in_place : {false, true}) {
            std::vector<double> mine(7);
            for (int i = 0; i < 7; ++i) mine[i] = 10.0 * r + i;
            cudaMemcpy(a.p, mine.data(), 56, cudaMemcpyHostToDevice);
            void* dst = in_place ? a.p : b.p;
            failures[r] +=
                ncclBroadcast(a.p, dst, 7, ncclFloat64, root, comm, nullptr) != ncclSuccess;
            std::vector<double> out(7);
            cudaMemcpy(out.data(), dst, 56, cudaMemcpyDeviceToHost);
            got[r].insert(got[r].end(), out.begin(), out.end());
          }
        ncclCommDestroy(comm);
      });
      for (int r = 0; r < n; ++r) {
        CHECK(failures[r] == 0);
        REQUIRE(got[r].size() == static_cast<std::size_t>(n * 2 * 7));
        for (int root = 0; root < n; ++root)
          for (int place = 0; place < 2; ++place)
            for (int i = 0; i < 7; ++i)
              CHECK(got[r][(root * 2 + place) * 7 + i] == 10.0 * root + i);
      }
    }
  }
}

TEST_CASE("emu nccl: a grouped send/recv ring step completes on every rank", "[nccl]") {
  for (bool deferred : {false, true}) {
    const StreamMode mode(deferred);
    for (int n : {1, 2, 3, 4}) {
      const ncclUniqueId id = fresh_id();
      std::vector<std::vector<float>> got(n);
      std::vector<int> failures(n, 0);
      run_ranks(n, [&](int r) {
        ncclComm_t comm = join(n, id, r);
        if (comm == nullptr) return;
        cudaStream_t s = nullptr;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        const DeviceBuffer out(1000 * 4), in(1000 * 4);
        std::vector<float> v(1000, static_cast<float>(r));
        cudaMemcpyAsync(out.p, v.data(), 4000, cudaMemcpyHostToDevice, s);
        // Three steps: each forwards what the last one received.
        for (int step = 0; step < 3; ++step) {
          void* from = step % 2 == 0 ? out.p : in.p;
          void* to = step % 2 == 0 ? in.p : out.p;
          failures[r] += ncclGroupStart() != ncclSuccess;
          failures[r] += ncclSend(from, 1000, ncclFloat32, (r + 1) % n, comm, s) != ncclSuccess;
          failures[r] += ncclRecv(to, 1000, ncclFloat32, (r + n - 1) % n, comm, s) != ncclSuccess;
          failures[r] += ncclGroupEnd() != ncclSuccess;
        }
        const Bytes b = read_back(in.p, 4000, s);
        got[r].resize(1000);
        std::memcpy(got[r].data(), b.data(), 4000);
        cudaStreamDestroy(s);
        ncclCommDestroy(comm);
      });
      for (int r = 0; r < n; ++r) {
        CHECK(failures[r] == 0);
        REQUIRE(got[r].size() == 1000);
        CHECK(got[r][0] == static_cast<float>((r + 3 * n - 3) % n));
        CHECK(got[r][999] == static_cast<float>((r + 3 * n - 3) % n));
      }
    }
  }
}

TEST_CASE("emu nccl: one thread drives two ranks through one group", "[nccl]") {
  const ncclUniqueId id = fresh_id();
  std::vector<ncclComm_t> comms(2, nullptr);
  run_ranks(2, [&](int r) { comms[r] = join(2, id, r); });  // init blocks: one thread per rank
  REQUIRE(comms[0] != nullptr);
  REQUIRE(comms[1] != nullptr);
  cudaSetDevice(0);
  const DeviceBuffer a(8);
  cudaSetDevice(1);
  const DeviceBuffer b(8);
  const float one = 1.0f, two = 2.0f;
  cudaMemcpy(a.p, &one, 4, cudaMemcpyHostToDevice);
  cudaMemcpy(b.p, &two, 4, cudaMemcpyHostToDevice);
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclAllReduce(a.p, a.p, 1, ncclFloat32, ncclSum, comms[0], nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(b.p, b.p, 1, ncclFloat32, ncclSum, comms[1], nullptr) == ncclSuccess);
  CHECK(ncclSend(a.p, 1, ncclFloat32, 1, comms[0], nullptr) == ncclSuccess);
  CHECK(ncclRecv(b.bytes() + 4, 1, ncclFloat32, 0, comms[1], nullptr) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  float got[2] = {0, 0};
  cudaMemcpy(got, b.p, 8, cudaMemcpyDeviceToHost);
  CHECK(got[0] == 3.0f);
  CHECK(got[1] == 3.0f);
  cudaSetDevice(0);
  CHECK(ncclCommDestroy(comms[0]) == ncclSuccess);
  CHECK(ncclCommDestroy(comms[1]) == ncclSuccess);
}

TEST_CASE("emu nccl: a collective runs after its stream's earlier work, later work sees it",
          "[nccl]") {
  const StreamMode mode(true);
  const int n = 2;
  const ncclUniqueId id = fresh_id();
  std::vector<float> before(n), after(n);
  std::vector<int> failures(n, 0);
  Barrier barrier(n);
  run_ranks(n, [&](int r) {
    ncclComm_t comm = join(n, id, r);
    if (comm == nullptr) return;
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float* d = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float));
    float* pinned = nullptr;
    cudaMallocHost(reinterpret_cast<void**>(&pinned), 64 * sizeof(float));
    pinned[5] = -1.0f;
    STOKE_LAUNCH(nccl_test_fill, 1, 64, 0, s)(d, 64, static_cast<float>(r + 1));  // queued
    failures[r] += ncclAllReduce(d, d, 64, ncclFloat32, ncclSum, comm, s) != ncclSuccess;
    STOKE_LAUNCH(nccl_test_add, 1, 64, 0, s)(d, 64, 0.5f);  // queued after the allreduce
    cudaMemcpyAsync(pinned, d, 64 * sizeof(float), cudaMemcpyDeviceToHost, s);
    before[r] = pinned[5];  // the copy has not run: the stream was not waited for
    cudaStreamSynchronize(s);
    after[r] = pinned[5];
    barrier.wait();  // no rank's cudaFree (which runs every stream) before both have read
    cudaFreeHost(pinned);
    cudaFree(d);
    cudaStreamDestroy(s);
    ncclCommDestroy(comm);
  });
  for (int r = 0; r < n; ++r) {
    CHECK(failures[r] == 0);
    CHECK(before[r] == -1.0f);
    CHECK(after[r] == 1.0f + 2.0f + 0.5f);
  }
}

TEST_CASE("emu nccl: ncclCommAbort wakes the other ranks with ncclRemoteError", "[nccl]") {
  for (bool deferred : {false, true}) {
    const StreamMode mode(deferred);
    const int n = 3;
    const ncclUniqueId id = fresh_id();
    std::vector<ncclResult_t> call(n, ncclSuccess), async_before(n, ncclInProgress),
        async_after(n, ncclInProgress), later(n, ncclSuccess);
    std::vector<std::string> last(n);
    Barrier barrier(n);
    run_ranks(n, [&](int r) {
      ncclComm_t comm = join(n, id, r);
      if (comm == nullptr) return;
      const DeviceBuffer buf(64);
      if (r > 0) ncclCommGetAsyncError(comm, &async_before[r]);
      barrier.wait();
      if (r == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the others block
        call[r] = ncclCommAbort(comm);
        return;
      }
      // Rank 1 waits in a collective, rank 2 in a receive from the aborting rank.
      call[r] = r == 1 ? ncclAllReduce(buf.p, buf.p, 4, ncclFloat32, ncclSum, comm, nullptr)
                       : ncclRecv(buf.p, 4, ncclFloat32, 0, comm, nullptr);
      ncclCommGetAsyncError(comm, &async_after[r]);
      last[r] = ncclGetLastError(comm);
      later[r] = ncclBroadcast(buf.p, buf.p, 4, ncclFloat32, 1, comm, nullptr);
      ncclCommDestroy(comm);
    });
    CHECK(call[0] == ncclSuccess);
    for (int r = 1; r < n; ++r) {
      INFO("deferred " << deferred << ", rank " << r << ": " << last[r]);
      CHECK(async_before[r] == ncclSuccess);
      CHECK(call[r] == ncclRemoteError);
      CHECK(async_after[r] == ncclRemoteError);
      CHECK(last[r].find("rank 0 aborted") != std::string::npos);
      CHECK(later[r] == ncclRemoteError);
    }
  }
}

TEST_CASE("emu nccl: aborting a comm from another thread wakes its own blocked call", "[nccl]") {
  const ncclUniqueId id = fresh_id();
  ncclResult_t call = ncclSuccess, again = ncclSuccess;
  std::string last;
  Barrier aborted(2);  // rank 1 leaves only after the abort (or rank 0 would see it leave)
  run_ranks(2, [&](int r) {
    ncclComm_t comm = join(2, id, r);
    if (comm == nullptr) return;
    if (r == 1) {  // never joins the collective, so rank 0 blocks until the watchdog aborts it
      aborted.wait();
      ncclCommDestroy(comm);
      return;
    }
    const DeviceBuffer buf(64);
    std::thread watchdog([comm, &aborted] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 is blocked by then
      ncclCommAbort(comm);
      aborted.wait();
    });
    call = ncclAllReduce(buf.p, buf.p, 4, ncclFloat32, ncclSum, comm, nullptr);
    watchdog.join();
    last = ncclGetLastError(comm);  // the handle stays readable after the abort
    again = ncclAllReduce(buf.p, buf.p, 4, ncclFloat32, ncclSum, comm, nullptr);
  });
  INFO(last);
  CHECK(call == ncclRemoteError);
  CHECK(last.find("rank 0 aborted") != std::string::npos);
  CHECK(again == ncclInvalidUsage);
}

TEST_CASE("emu nccl: init errors fail every waiting rank instead of hanging", "[nccl]") {
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 0, fresh_id(), 0) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(&comm, 2, fresh_id(), -1) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(&comm, 2, fresh_id(), 2) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("rank 2 of 2") != std::string::npos);
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclCommInitRank(&comm, 1, fresh_id(), 0) == ncclInvalidUsage);
  CHECK(ncclGroupEnd() == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);  // no group open

  // The same rank twice, then nranks that disagree: both joiners fail, and the id stays failed.
  for (int variant = 0; variant < 2; ++variant) {
    const ncclUniqueId id = fresh_id();
    std::vector<ncclResult_t> rc(2, ncclSuccess);
    std::vector<std::string> why(2);
    run_ranks(2, [&](int r) {
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // rank 0 waits
      ncclComm_t c = nullptr;
      rc[r] = variant == 0 ? ncclCommInitRank(&c, 2, id, 0) : ncclCommInitRank(&c, 2 + r, id, r);
      why[r] = ncclGetLastError(nullptr);
    });
    INFO(why[0] << " / " << why[1]);
    CHECK(rc[0] == ncclInvalidArgument);
    CHECK(rc[1] == ncclInvalidArgument);
    CHECK(why[1].find(variant == 0 ? "joined twice" : "joined with nranks") != std::string::npos);
    CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclInvalidArgument);
  }
}

TEST_CASE("emu nccl: argument checks, mismatched calls and destroyed peers", "[nccl]") {
  ncclComm_t one = nullptr;
  cudaSetDevice(0);
  REQUIRE(ncclCommInitRank(&one, 1, fresh_id(), 0) == ncclSuccess);
  std::vector<float> host(4, 1.0f);
  const DeviceBuffer d(16);
  CHECK(ncclAllReduce(host.data(), d.p, 4, ncclFloat32, ncclSum, one, nullptr) ==
        ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(one)).find("not device memory") != std::string::npos);
  CHECK(ncclAllReduce(d.p, d.p, 5, ncclFloat32, ncclSum, one, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(d.p, d.p, 4, ncclFloat8e4m3, ncclSum, one, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(d.p, d.p, 4, ncclFloat32, ncclNumOps, one, nullptr) == ncclInvalidArgument);
  CHECK(ncclBroadcast(d.p, d.p, 4, ncclFloat32, 1, one, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, one, nullptr) == ncclSuccess);
  cudaSetDevice(1);
  {
    const DeviceBuffer other(16);  // device 1; the comm is on device 0
    CHECK(ncclAllReduce(other.p, other.p, 4, ncclFloat32, ncclSum, one, nullptr) ==
          ncclInvalidArgument);
    CHECK(std::string(ncclGetLastError(one)).find("memory of device 1") != std::string::npos);
  }
  cudaSetDevice(0);
  // A refused call inside a group drops the group.
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclAllReduce(d.p, d.p, 4, ncclFloat32, ncclSum, one, nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(host.data(), d.p, 4, ncclFloat32, ncclSum, one, nullptr) ==
        ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidArgument);
  CHECK(ncclCommDestroy(one) == ncclSuccess);
  CHECK(ncclAllReduce(d.p, d.p, 4, ncclFloat32, ncclSum, one, nullptr) == ncclInvalidUsage);

  // Two ranks disagree on the count, then on a message's size, then rank 1 leaves.
  const ncclUniqueId id = fresh_id();
  std::vector<ncclResult_t> coll(2), p2p(2), orphan(2, ncclSuccess);
  std::vector<std::string> why(2);
  run_ranks(2, [&](int r) {
    ncclComm_t comm = join(2, id, r);
    if (comm == nullptr) return;
    const DeviceBuffer b(64);
    coll[r] = ncclAllReduce(b.p, b.p, 4 + r, ncclFloat32, ncclSum, comm, nullptr);
    why[r] = ncclGetLastError(comm);
    p2p[r] = r == 0 ? ncclSend(b.p, 4, ncclFloat32, 1, comm, nullptr)
                    : ncclRecv(b.p, 8, ncclFloat32, 0, comm, nullptr);
    if (r == 0) orphan[r] = ncclAllReduce(b.p, b.p, 4, ncclFloat32, ncclSum, comm, nullptr);
    ncclCommDestroy(comm);
  });
  INFO(why[0]);
  CHECK(coll[0] == ncclInvalidUsage);
  CHECK(coll[1] == ncclInvalidUsage);
  CHECK(why[0].find("the count differs") != std::string::npos);
  CHECK(p2p[0] == ncclInvalidUsage);
  CHECK(p2p[1] == ncclInvalidUsage);
  CHECK(orphan[0] == ncclInvalidUsage);  // rank 1 destroyed its comm instead of joining
}

TEST_CASE("emu nccl: unique ids, version, error strings and STOKE_NCCL_CHECK", "[nccl]") {
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    const ncclUniqueId id = fresh_id();
    ids.emplace(id.internal, sizeof id.internal);
  }
  CHECK(ids.size() == 100);
  int version = 0;
  CHECK(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
  CHECK(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
  CHECK(std::string(ncclGetErrorString(ncclInvalidArgument)) == "invalid argument");
  CHECK(std::string(ncclGetErrorString(ncclInvalidUsage)) == "invalid usage");
  CHECK(std::string(ncclGetErrorString(ncclRemoteError)) ==
        "remote process exited or there was a network error");
  CHECK(std::string(ncclGetErrorString(ncclUnhandledCudaError)) == "unhandled cuda error");
  CHECK(std::string(ncclGetErrorString(ncclSystemError)) == "unhandled system error");
  CHECK(std::string(ncclGetErrorString(ncclInternalError)) == "internal error");
  CHECK(std::string(ncclGetErrorString(ncclInProgress)) == "NCCL operation in progress");
  std::string message;
  try {
    ncclComm_t comm = nullptr;
    STOKE_NCCL_CHECK(ncclCommInitRank(&comm, 2, fresh_id(), 5));
  } catch (const stoke::Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("stoke::nccl") != std::string::npos);
  CHECK(message.find("ncclCommInitRank(&comm, 2, fresh_id(), 5)") != std::string::npos);
  CHECK(message.find("invalid argument") != std::string::npos);
  CHECK(message.find("rank 5 of 2") != std::string::npos);
}
