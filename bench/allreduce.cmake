# stoke-bench-allreduce (bench/allreduce.cpp, the model in allreduce_model.cpp): MPI's allreduce vs
# stoke's ring over MpiCommunicator, run under mpirun. Only in builds with MPI (STOKE_MPI, which
# defines STOKE_HAS_MPI). Included from bench/CMakeLists.txt.
if(STOKE_MPI)
  add_executable(stoke-bench-allreduce ${CMAKE_CURRENT_SOURCE_DIR}/allreduce.cpp
                                       ${CMAKE_CURRENT_SOURCE_DIR}/allreduce_model.cpp)
  target_link_libraries(stoke-bench-allreduce PRIVATE stoke::stoke stoke_flags)
endif()
