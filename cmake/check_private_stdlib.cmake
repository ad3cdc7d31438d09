# Run after the library is linked (CMakeLists.txt, POST_BUILD):
#   cmake -DLIB=<library> -DNM=<nm> -P check_private_stdlib.cmake
# The same rule as setup.py's (build_backend/fp8_dummy_build_config.py): std::ostream,
# std::locale and std::ios_base members live in libstdc++.so alone, so a library that defines
# one carries a private copy of libstdc++'s stream code, whose std::locale a process that
# loaded libstdc++.so first (torch's) never sets up: each number it formats comes out empty
# or crashes. Such a library is removed and the build fails, naming it. Without nm: no check.
if(NOT NM OR NOT EXISTS "${NM}")
  return()
endif()
execute_process(COMMAND "${NM}" --defined-only "${LIB}"
  OUTPUT_VARIABLE _symbols RESULT_VARIABLE _rc ERROR_QUIET)
if(NOT _rc EQUAL 0)
  return()
endif()
string(REGEX MATCHALL "[ \t]_ZNK?(So|St6locale|St8ios_base)[A-Za-z0-9_]*" _found "${_symbols}")
list(LENGTH _found _count)
if(_count GREATER 0)
  list(GET _found 0 _first)
  string(STRIP "${_first}" _first)
  file(REMOVE "${LIB}")
  message(FATAL_ERROR
    "fp8_dummy: ${LIB} defines ${_count} of libstdc++'s own stream and locale symbols "
    "(e.g. ${_first}): the compiler and link (CMAKE_CXX_COMPILER=${CXX}) made a private copy "
    "of part of libstdc++, whose std::locale is never set up in a process that loaded "
    "libstdc++.so before it (torch's), so formatting a number fails or crashes. Configure "
    "with a compiler that links libstdc++.so, e.g. -DCMAKE_CXX_COMPILER=g++ (the system's); "
    "the library was removed.")
endif()
