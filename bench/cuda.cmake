# bench/ops_cuda (stoke-bench-ops-cuda): our CUDA kernels vs cuBLAS/cuDNN, one source per group
# of sections sharing bench/ops_cuda.h. Only with the real backend (stoke_cuda); without a GPU the
# program says so and exits 0.
if(TARGET stoke_cuda)
  add_executable(stoke-bench-ops-cuda ops_cuda.cpp ops_cuda_conv.cpp ops_cuda_memory.cpp
                                      ops_cuda_nn.cpp ops_cuda_optim.cpp ops_cuda_data.cpp)
  target_link_libraries(stoke-bench-ops-cuda PRIVATE stoke::stoke stoke_flags)
endif()

# bench/emu.cpp (stoke-bench-emu): cuda/emu's execution modes (OS threads, fibers on one worker and
# on every core) on single launches and on LeNet-5 / ResNet-8 training steps. Built wherever the
# emulated backend is (no GPU needed).
if(TARGET stoke_ops_cuda_emu AND TARGET stoke_nn)
  add_executable(stoke-bench-emu emu.cpp)
  target_link_libraries(stoke-bench-emu PRIVATE stoke_ops_cuda_emu stoke_nn stoke_flags)
endif()

# bench/train_cuda.cpp (stoke-bench-train-cuda): training throughput and MFU on a CUDA device,
# fp32/TF32/fp16/bf16, eager and CUDA-graphed (ResNet-50 at 224x224 by default). The real backend's
# binary says "no CUDA device" here; the emulated one (-emu) is smoke-run by ctest with --quick.
if(TARGET stoke_cuda)
  add_executable(stoke-bench-train-cuda train_cuda.cpp)
  target_link_libraries(stoke-bench-train-cuda PRIVATE stoke::stoke stoke_flags)
endif()
if(TARGET stoke_ops_cuda_emu AND TARGET stoke_nn)
  add_executable(stoke-bench-train-cuda-emu train_cuda.cpp)
  target_link_libraries(stoke-bench-train-cuda-emu PRIVATE stoke_ops_cuda_emu stoke_nn stoke_flags)
endif()
