# The emu kernel-coverage check (a CTest test, run with cmake -P):
#   cmake -DKERNEL_DIR=<repo>/cuda/kernels -DTEST_DIR=<repo>/tests/cuda -P check_kernel_coverage.cmake
# Lists every __global__ function in KERNEL_DIR/*.cu and fails, naming them, if a kernel's name
# does not occur (as a whole word) in any TEST_DIR/*.cpp: every kernel must be run by a test.
cmake_minimum_required(VERSION 3.20)
if(NOT KERNEL_DIR OR NOT TEST_DIR)
  message(FATAL_ERROR "check_kernel_coverage: pass -DKERNEL_DIR=... and -DTEST_DIR=...")
endif()

file(GLOB _kernel_files ${KERNEL_DIR}/*.cu)
file(GLOB _test_files ${TEST_DIR}/*.cpp)
set(_tests "")
foreach(f ${_test_files})
  file(READ ${f} _text)
  string(APPEND _tests "\n${_text}")
endforeach()

# `__global__ [static|inline ...] void [__launch_bounds__(...)] NAME(`, across line breaks.
set(_ws "[ \t\r\n]")
set(_id "[A-Za-z_][A-Za-z0-9_]*")
set(_kernel_re
    "__global__${_ws}+(${_id}${_ws}+)*void${_ws}+(__launch_bounds__${_ws}*\\([^)]*\\)${_ws}*)?${_id}${_ws}*\\(")
set(_kernels "")
set(_missing "")
foreach(f ${_kernel_files})
  file(READ ${f} _text)
  string(REGEX MATCHALL "${_kernel_re}" _decls "${_text}")
  get_filename_component(_file ${f} NAME)
  foreach(d ${_decls})
    string(REGEX REPLACE "${_ws}*\\($" "" d "${d}")
    string(REGEX MATCH "${_id}$" _name "${d}")
    if(NOT _name OR "${_name}" IN_LIST _kernels)
      continue()  # a declaration repeated by its definition counts once
    endif()
    list(APPEND _kernels ${_name})
    if(NOT _tests MATCHES "(^|[^A-Za-z0-9_])${_name}([^A-Za-z0-9_]|$)")
      list(APPEND _missing "${_name} (${_file})")
    endif()
  endforeach()
endforeach()

list(LENGTH _kernels _n)
list(LENGTH _missing _n_missing)
math(EXPR _covered "${_n} - ${_n_missing}")
message(STATUS "${_covered} of ${_n} kernels covered")
if(_n_missing GREATER 0)
  list(JOIN _missing "\n  " _list)
  message(FATAL_ERROR
          "check_kernel_coverage: ${_n_missing} __global__ kernel(s) in ${KERNEL_DIR} are not named "
          "by any test in ${TEST_DIR}/*.cpp:\n  ${_list}")
endif()
