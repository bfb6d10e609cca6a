# stoke-bench-loader: the data loader's images/s by storage format and worker count, with torch's
# DataLoader (bench/loader_torch.py) on the PNG folder in the same run. Included from
# bench/CMakeLists.txt.
add_executable(stoke-bench-loader ${CMAKE_CURRENT_SOURCE_DIR}/loader.cpp)
target_link_libraries(stoke-bench-loader PRIVATE stoke::stoke stoke_flags)
target_compile_definitions(stoke-bench-loader PRIVATE
  STOKE_BENCH_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
