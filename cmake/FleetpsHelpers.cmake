# Helper functions shared by every folder's CMakeLists.txt.

# Flags applied to every fleetps target.
function(fleetps_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wnon-virtual-dtor>)
  if(FLEETPS_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  # clang checks the thread-safety annotations (common/thread_annotations.h: GUARDED_BY,
  # REQUIRES, ...) and a violation is an error in every clang build, the fuzz tree
  # (scripts/fuzz.sh) included; gcc has no such analysis and sees empty macros.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety -Werror=thread-safety>)
  endif()
  if(FLEETPS_SANITIZE)
    # C++ sources only: nvcc does not take these flags (the CUDA kernels are not sanitized).
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# fleetps_add_library(NAME fleetps_common ALIAS fleetps::common SOURCES ... DEPS ...)
function(fleetps_add_library)
  cmake_parse_arguments(ARG "" "NAME;ALIAS" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SOURCES})
  add_library(${ARG_ALIAS} ALIAS ${ARG_NAME})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  fleetps_target_defaults(${ARG_NAME})
endfunction()

# fleetps_add_executable(NAME pserver SOURCES main.cc DEPS ...)
function(fleetps_add_executable)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
  fleetps_target_defaults(${ARG_NAME})
endfunction()

# fleetps_add_test(NAME common_test LABELS unit SOURCES ... DEPS ...)
# One Catch2 binary per library; registered with CTest under the given labels.
function(fleetps_add_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE fleetps_catch_main Catch2::Catch2 ${ARG_DEPS})
  target_compile_definitions(${ARG_NAME} PRIVATE
    FLEETPS_SOURCE_DIR="${PROJECT_SOURCE_DIR}" FLEETPS_BINARY_DIR="${PROJECT_BINARY_DIR}")
  fleetps_target_defaults(${ARG_NAME})
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME} --use-colour no)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS MATCHES "unit|integration")
    add_dependencies(fleetps_checks ${ARG_NAME})
  endif()
endfunction()

# Adds each listed sub-folder that has a CMakeLists.txt.
function(fleetps_add_subdirectories)
  foreach(dir ${ARGN})
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/CMakeLists.txt)
      add_subdirectory(${dir})
    endif()
  endforeach()
endfunction()
