# A GPU program run where no device is visible must say so and exit 0 (the promise of
# stoke-gpu-selftest, stoke-bench-ops-cuda and the kernel sandboxes). Run with cmake -P:
#   cmake -DPROGRAM=<path> -DNAME=<program name> -P check_skips_without_gpu.cmake
# CUDA_VISIBLE_DEVICES=-1 hides every GPU, so on a machine with one this still checks the no-GPU
# path; ctest's PASS_REGULAR_EXPRESSION alone would ignore the exit status, hence this script.
cmake_minimum_required(VERSION 3.20)
if(NOT PROGRAM OR NOT NAME)
  message(FATAL_ERROR "check_skips_without_gpu: pass -DPROGRAM=... and -DNAME=...")
endif()
set(ENV{CUDA_VISIBLE_DEVICES} "-1")
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "${NAME} with no visible GPU exited with ${rc}, not 0:\n${out}${err}")
endif()
if(NOT out MATCHES "^${NAME}: no CUDA device \\([^\n]+\\): skipped\n$")
  message(FATAL_ERROR
          "${NAME} with no visible GPU printed\n${out}${err}\ninstead of the one line "
          "\"${NAME}: no CUDA device (<reason>): skipped\"")
endif()
string(STRIP "${out}" out)
message(STATUS "${out}")
