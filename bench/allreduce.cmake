# stoke-bench-allreduce (bench/allreduce.cpp, the NCCL engine in allreduce_nccl.cpp, the model in
# allreduce_model.cpp, the tuner's report in allreduce_tuner.cpp): the engine's allreduce vs
# stoke's ring, tree, halving-doubling and the tuner's choice, run under mpirun (MPI, cpu tensors)
# or with --engine nccl (cuda tensors) where NCCL was found. Included from bench/CMakeLists.txt.
set(_allreduce_src ${CMAKE_CURRENT_SOURCE_DIR}/allreduce.cpp
                   ${CMAKE_CURRENT_SOURCE_DIR}/allreduce_model.cpp
                   ${CMAKE_CURRENT_SOURCE_DIR}/allreduce_tuner.cpp)
if(STOKE_MPI OR TARGET stoke_dist_nccl)
  add_executable(stoke-bench-allreduce ${_allreduce_src})
  target_link_libraries(stoke-bench-allreduce PRIVATE stoke::stoke stoke_flags)
  if(TARGET stoke_dist_nccl)
    target_sources(stoke-bench-allreduce PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/allreduce_nccl.cpp)
    target_compile_definitions(stoke-bench-allreduce PRIVATE STOKE_BENCH_NCCL=1)
  endif()
endif()
# The same program against cuda/emu's NCCL (ranks as threads on the emulator's two devices), for
# the smoke test of --engine nccl on machines without a GPU. Not installed.
if(TARGET stoke_dist_nccl_emu)
  add_executable(stoke-bench-allreduce-emu ${_allreduce_src}
                                           ${CMAKE_CURRENT_SOURCE_DIR}/allreduce_nccl.cpp)
  target_link_libraries(stoke-bench-allreduce-emu PRIVATE stoke_dist_nccl_emu stoke_flags)
  target_compile_definitions(stoke-bench-allreduce-emu PRIVATE STOKE_BENCH_NCCL=1)
endif()
