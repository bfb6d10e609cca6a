// stoke-bench-allreduce --engine nccl: the same measurement (bench/allreduce.cpp) on cuda tensors
// over dist::NcclCommunicator, NCCL's own allreduce against stoke's ring over NCCL's send/recv.
// Under mpirun: one process per GPU, the GPU of its local rank, NCCL's unique id sent over MPI
// (NcclCommunicator::bootstrap). Otherwise: one thread per GPU of this process, as nccl-tests'
// -g; that is also how the emulator build (stoke-bench-allreduce-emu) runs it on its two devices.
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "bench/allreduce.h"
#include "cuda/compat.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/stream.h"
#include "dist/cuda/nccl.h"
#include "dist/launch.h"
#include "stoke/stoke.h"  // links the CUDA backend's registration (allocator, copies, kernels)
#if defined(STOKE_HAS_MPI)
#include "dist/mpi.h"
#endif

namespace stoke::bench {
namespace {

constexpr const char* kProg = "stoke-bench-allreduce";

// A timed collective is done on this rank when the compute stream, which NCCL's stream joins
// after every call, has drained.
std::function<void()> stream_sync(int device) {
  return [device] {
    const cudaError_t rc = cudaStreamSynchronize(cuda::current_stream(device));
    if (rc != cudaSuccess)
      throw Error(detail::str_cat(kProg, ": cudaStreamSynchronize: ", cudaGetErrorString(rc)));
  };
}

}  // namespace

int run_allreduce_bench_nccl(const AllreduceArgs& a) {
  // A rank whose peer failed would wait in NCCL: the watchdog aborts it after this long.
  const dist::NcclOptions options{.timeout = std::chrono::seconds(120)};
  if (a.dtype == DType::f64) {
    std::cerr << kProg
              << ": --engine nccl: --dtype f64 is not measured on GPUs (stoke's ring "
                 "reduces f64 on the CPU only)\n";
    return 2;
  }
  if (dist::launcher_world_size() >= 1) {  // even -np 1: one process per GPU
#if defined(STOKE_HAS_MPI)
    std::unique_ptr<dist::MpiCommunicator> mpi;
    try {
      mpi = std::make_unique<dist::MpiCommunicator>();
      auto nccl = dist::NcclCommunicator::bootstrap(*mpi, -1, options);
      cuda::set_device(nccl->device());
      return run_allreduce_bench(
          {nccl.get(), Device::cuda(nccl->device()),
           "NcclCommunicator, cuda tensors, one process per GPU", stream_sync(nccl->device())},
          a);
    } catch (const std::exception& e) {
      std::cerr << kProg << ": " << e.what() << std::endl;
      if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
      return 1;
    }
#else
    std::cerr << kProg
              << ": started by mpirun, but this build has no MPI to send NCCL's id over; "
                 "run it without mpirun (one thread per GPU)\n";
    return 2;
#endif
  }
  int gpus = 0;
  try {
    gpus = cuda::device_count();
  } catch (const std::exception& e) {
    std::cerr << kProg << ": --engine nccl: " << e.what() << "\n";
    return 2;
  }
  if (gpus < 1 || a.gpus > gpus) {
    std::cerr << kProg << ": --engine nccl: " << (a.gpus > 0 ? a.gpus : 1)
              << " GPU(s) wanted, this machine has " << gpus << "\n";
    return 2;
  }
  const int n = a.gpus > 0 ? a.gpus : gpus;
  const ncclUniqueId id = dist::NcclCommunicator::make_unique_id();
  std::vector<int> rc(static_cast<size_t>(n), 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        cuda::set_device(r);
        dist::NcclCommunicator comm(id, r, n, r, options);
        rc[static_cast<size_t>(r)] = run_allreduce_bench(
            {&comm, Device::cuda(r), "NcclCommunicator, cuda tensors, one thread per GPU",
             stream_sync(r)},
            a);
      } catch (const std::exception& e) {
        std::cerr << kProg << ": rank " << r << ": " << e.what() << std::endl;
      }
    });
  for (auto& t : threads) t.join();
  int worst = 0;
  for (int c : rc) worst = std::max(worst, c);
  return worst;
}

}  // namespace stoke::bench
