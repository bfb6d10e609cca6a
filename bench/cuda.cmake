# bench/ops_cuda (stoke-bench-ops-cuda): our CUDA kernels vs cuBLAS/cuDNN, one source per group
# of sections sharing bench/ops_cuda.h. Only with the real backend (stoke_cuda); without a GPU the
# program says so and exits 0.
if(TARGET stoke_cuda)
  add_executable(stoke-bench-ops-cuda ops_cuda.cpp ops_cuda_conv.cpp ops_cuda_memory.cpp
                                      ops_cuda_nn.cpp ops_cuda_optim.cpp ops_cuda_data.cpp)
  target_link_libraries(stoke-bench-ops-cuda PRIVATE stoke::stoke stoke_flags)
endif()
