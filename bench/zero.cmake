# stoke-bench-zero (bench/zero.cpp): per-rank memory and step time of DDP, ZeRO-1 and ZeRO-2 under
# mpirun, and the projected memory of 1 B and 7.5 B parameter models. Included from
# bench/CMakeLists.txt.
if(STOKE_MPI)
  add_executable(stoke-bench-zero ${CMAKE_CURRENT_SOURCE_DIR}/zero.cpp)
  target_link_libraries(stoke-bench-zero PRIVATE stoke::stoke stoke_flags)
endif()
