# stoke-bench-zero (bench/zero.cpp): per-rank memory and step time of DDP and ZeRO-1, 2, 3 under
# mpirun, in f32, --amp fp16 and fp16 parameters with master weights, and the projected memory of
# 1 B and 7.5 B parameter models. Included from bench/CMakeLists.txt.
if(STOKE_MPI)
  add_executable(stoke-bench-zero ${CMAKE_CURRENT_SOURCE_DIR}/zero.cpp)
  target_link_libraries(stoke-bench-zero PRIVATE stoke::stoke stoke_flags)
  if(STOKE_TESTS AND MPIEXEC_EXECUTABLE)
    # A smoke run (not a timing): every configuration steps, and the JSON line is printed.
    set(_name "dist: zero: stoke-bench-zero runs DDP and ZeRO-1/2/3 in f32, fp16 and fp16 with master weights under mpirun -np 2 (smoke)")
    add_test(NAME "${_name}"
             COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe
                     ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:stoke-bench-zero> --model resnet8
                     --steps 1 --batch 2)
    set(_env OMPI_MCA_mpi_yield_when_idle=1 STOKE_NUM_THREADS=1)
    if(STOKE_SANITIZE MATCHES "address")  # OpenMPI's own allocations, as tests/CMakeLists.txt says
      list(APPEND _env
           "ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0"
           LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/dist/mpi/lsan_openmpi.supp
           OMPI_MCA_mca_base_component_disable_dlclose=1)
    endif()
    set_tests_properties("${_name}" PROPERTIES ENVIRONMENT "${_env}"
                         PASS_REGULAR_EXPRESSION "\"config\": \"zero3 adamw\", \"precision\": \"fp16p\""
                         TIMEOUT 180 PROCESSORS 2)
  endif()
endif()
