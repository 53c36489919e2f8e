# GCC 12.2 (Debian 12's g++) miscompiles vectors of equal elements followed by zeros when AVX-512 is
# enabled: std::vector<int64_t>{3, 3, 3, 0} holds {3, 3, 3, 3} (cmake/vector_constant_probe.cpp).
# Every machine of the kind tessel runs on has AVX-512 (Sapphire Rapids, Zen 4/5), so -march=native
# builds are exposed: values silently wrong wherever the SLP vectoriser builds such a constant.
# This runs the probe with the build's own optimisation and target flags; when it fails, the build
# turns off the SLP vectoriser (the pass that makes these vectors; the loop vectoriser stays on),
# checks the probe again, and refuses to configure if that did not cure it.
#   tessel_check_vector_constants(<target flags>)  -> may add -fno-tree-slp-vectorize
function(tessel_probe_vector_constants result flags)
  try_run(run_rc compile_ok
          SOURCES ${CMAKE_SOURCE_DIR}/cmake/vector_constant_probe.cpp
          COMPILE_DEFINITIONS -O3 ${flags}
          CXX_STANDARD 20
          COMPILE_OUTPUT_VARIABLE compile_out
          RUN_OUTPUT_VARIABLE run_out)
  if(NOT compile_ok)
    message(FATAL_ERROR "cmake/vector_constant_probe.cpp does not compile with -O3 ${flags}:\n${compile_out}")
  endif()
  if(run_rc EQUAL 0)
    set(${result} TRUE PARENT_SCOPE)
  else()
    set(${result} FALSE PARENT_SCOPE)
    message(STATUS "vector constant probe with -O3 ${flags}: wrong values\n${run_out}")
  endif()
endfunction()

function(tessel_check_vector_constants target_flags)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR CMAKE_CROSSCOMPILING)
    return()
  endif()
  tessel_probe_vector_constants(ok "${target_flags}")
  if(ok)
    message(STATUS "vector constants: ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} with ${target_flags} builds them right")
    return()
  endif()
  tessel_probe_vector_constants(cured "${target_flags};-fno-tree-slp-vectorize")
  if(NOT cured)
    message(FATAL_ERROR "g++ ${CMAKE_CXX_COMPILER_VERSION} with ${target_flags} builds wrong vector constants even "
                        "with -fno-tree-slp-vectorize (cmake/vector_constant_probe.cpp). Build with clang "
                        "(CXX=clang++) or a portable binary (-DTESSEL_NATIVE=OFF).")
  endif()
  message(WARNING "g++ ${CMAKE_CXX_COMPILER_VERSION} with ${target_flags} builds vectors like {3, 3, 3, 0} as "
                  "{3, 3, 3, 3} (a GCC 12 AVX-512 wrong-code bug; cmake/vector_constant_probe.cpp): building "
                  "with -fno-tree-slp-vectorize, which the probe shows cures it.")
  add_compile_options(-fno-tree-slp-vectorize)
endfunction()
