# fp8_dummy's CMake package, the same file for a pip-installed wheel, a CMake install
# and the source tree (editable install). Every path is found relative to this file,
# so an installed tree can be moved.
#
#   find_package(fp8_dummy REQUIRED)   # fp8_dummy_DIR: python -m fp8_dummy --cmakedir
#
# Targets:
#   fp8_dummy::headers       the C++ API, <fp8_dummy/fp8_dummy.h> (INTERFACE). It needs
#                            torch's headers: the consumer does find_package(Torch) itself
#                            (not done here: it needs torch's prefix and can be slow), and
#                            the target then links `torch` (C++ flags, include dirs).
#   fp8_dummy::cuda_headers  the torch-free device API, <fp8_dummy/cuda/*.h> (INTERFACE,
#                            include directory only; host code compiles it with any C++17
#                            compiler, device code with nvcc).
#   fp8_dummy::fp8_dummy     the operator library (SHARED), from a CMake install only. A
#                            wheel's library is a Python extension module: load it at run
#                            time instead, from fp8_dummy_LIBRARY.
# Variables:
#   fp8_dummy_INCLUDE_DIR    the directory holding fp8_dummy/fp8_dummy.h
#   fp8_dummy_LIBRARY        the library to load (torch.ops.load_library, dlopen), if any
#   fp8_dummy_VERSION        from fp8_dummyConfigVersion.cmake (absent in the source tree)

# Layouts: the wheel's fp8_dummy/share/cmake/fp8_dummy/ beside fp8_dummy/include/ and the
# library fp8_dummy/_C*.so; a CMake install's <prefix>/share/cmake/fp8_dummy/ beside
# <prefix>/include/ and <prefix>/lib*/; the source tree's cmake/ beside include/.
get_filename_component(_fp8_dummy_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT EXISTS "${_fp8_dummy_prefix}/include/fp8_dummy/fp8_dummy.h")
  get_filename_component(_fp8_dummy_prefix "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
set(fp8_dummy_INCLUDE_DIR "${_fp8_dummy_prefix}/include")
if(NOT EXISTS "${fp8_dummy_INCLUDE_DIR}/fp8_dummy/fp8_dummy.h")
  set(${CMAKE_FIND_PACKAGE_NAME}_FOUND FALSE)
  set(${CMAKE_FIND_PACKAGE_NAME}_NOT_FOUND_MESSAGE
      "fp8_dummy/fp8_dummy.h not found near ${CMAKE_CURRENT_LIST_FILE}")
  unset(_fp8_dummy_prefix)
  return()
endif()

if(NOT TARGET fp8_dummy::headers)
  add_library(fp8_dummy::headers INTERFACE IMPORTED)
  # Links torch's target when the consumer has one (evaluated at generate time, so
  # find_package(Torch) may come before or after this file).
  set_target_properties(fp8_dummy::headers PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${fp8_dummy_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "$<TARGET_NAME_IF_EXISTS:torch>")
endif()
if(NOT TARGET fp8_dummy::cuda_headers)
  add_library(fp8_dummy::cuda_headers INTERFACE IMPORTED)
  set_target_properties(fp8_dummy::cuda_headers PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${fp8_dummy_INCLUDE_DIR}")
endif()

# A CMake install exports its library target; a wheel or the source tree has the
# Python extension module instead.
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/fp8_dummyTargets.cmake")
  include("${CMAKE_CURRENT_LIST_DIR}/fp8_dummyTargets.cmake")
  get_target_property(fp8_dummy_LIBRARY fp8_dummy::fp8_dummy LOCATION)
else()
  file(GLOB _fp8_dummy_libs "${_fp8_dummy_prefix}/_C*.so" "${_fp8_dummy_prefix}/_C*.pyd"
       "${_fp8_dummy_prefix}/fp8_dummy/_C*.so" "${_fp8_dummy_prefix}/fp8_dummy/_C*.pyd")
  if(_fp8_dummy_libs)
    list(GET _fp8_dummy_libs 0 fp8_dummy_LIBRARY)
  else()
    set(fp8_dummy_LIBRARY "fp8_dummy_LIBRARY-NOTFOUND")
  endif()
  unset(_fp8_dummy_libs)
endif()
unset(_fp8_dummy_prefix)

if(NOT ${CMAKE_FIND_PACKAGE_NAME}_FIND_QUIETLY)
  message(STATUS "Found fp8_dummy ${fp8_dummy_VERSION} (${CMAKE_CURRENT_LIST_DIR})")
endif()
