# fp8_dummy's CMake package, one relocatable file for a wheel, a CMake install and the source
# tree (docs/cpp.md): targets fp8_dummy::headers (the C++ API; links `torch` when the
# consumer has found it), fp8_dummy::cuda_headers (torch-free device API), fp8_dummy::fp8_dummy
# (CMake install only); fp8_dummy_INCLUDE_DIR, fp8_dummy_LIBRARY (the library to load).
# Layouts: a wheel's fp8_dummy/share/cmake/fp8_dummy/ (headers in fp8_dummy/include/, the
# library fp8_dummy/_C*.so, or a release wheel's fp8_dummy/_libs/torch-X.Y/_C.abi3.so per
# torch), a CMake install's <prefix>/share/cmake/fp8_dummy/, the source
# tree's cmake/ beside include/.
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
  # Evaluated at generate time: find_package(Torch) may come before or after this file.
  set_target_properties(fp8_dummy::headers PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${fp8_dummy_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "$<TARGET_NAME_IF_EXISTS:torch>")
endif()
if(NOT TARGET fp8_dummy::cuda_headers)
  add_library(fp8_dummy::cuda_headers INTERFACE IMPORTED)
  set_target_properties(fp8_dummy::cuda_headers PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${fp8_dummy_INCLUDE_DIR}")
endif()

# A CMake install exports its library target; a wheel or the source tree has the module.
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/fp8_dummyTargets.cmake")
  include("${CMAKE_CURRENT_LIST_DIR}/fp8_dummyTargets.cmake")
  get_target_property(fp8_dummy_LIBRARY fp8_dummy::fp8_dummy LOCATION)
else()
  file(GLOB _fp8_dummy_libs "${_fp8_dummy_prefix}/_C*.so" "${_fp8_dummy_prefix}/_C*.pyd"
       "${_fp8_dummy_prefix}/fp8_dummy/_C*.so" "${_fp8_dummy_prefix}/fp8_dummy/_C*.pyd")
  # A release wheel: a library per torch major.minor, the found Torch's (find_package it first).
  if(NOT _fp8_dummy_libs AND DEFINED Torch_VERSION)
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _fp8_dummy_torch "${Torch_VERSION}")
    file(GLOB _fp8_dummy_libs "${_fp8_dummy_prefix}/_libs/torch-${_fp8_dummy_torch}/_C.*so")
    unset(_fp8_dummy_torch)
  endif()
  set(fp8_dummy_LIBRARY "fp8_dummy_LIBRARY-NOTFOUND")
  if(_fp8_dummy_libs)
    list(GET _fp8_dummy_libs 0 fp8_dummy_LIBRARY)
  endif()
  unset(_fp8_dummy_libs)
endif()
unset(_fp8_dummy_prefix)

if(NOT ${CMAKE_FIND_PACKAGE_NAME}_FIND_QUIETLY)
  message(STATUS "Found fp8_dummy ${fp8_dummy_VERSION} (${CMAKE_CURRENT_LIST_DIR})")
endif()
