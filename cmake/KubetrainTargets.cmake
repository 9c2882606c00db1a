# Helpers that keep every folder's CMakeLists.txt short and alike.

# KUBETRAIN_SANITIZE=address,undefined or thread instruments every C and C++ target (`make
# sanitize` builds build-asan and build-tsan with it). A finding stops the program: recovery is
# off, so a test that triggers one fails.
set(KUBETRAIN_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined | thread | empty")
if(KUBETRAIN_SANITIZE)
  if(NOT KUBETRAIN_CUDA STREQUAL "OFF")
    message(FATAL_ERROR "KUBETRAIN_SANITIZE needs -DKUBETRAIN_CUDA=OFF: nvcc takes no -fsanitize")
  endif()
  add_compile_options(-fsanitize=${KUBETRAIN_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${KUBETRAIN_SANITIZE})
endif()

# kubetrain_library(NAME SOURCES ... [PUBLIC_LIBS ...] [PRIVATE_LIBS ...])
# The library kubetrain_NAME and its alias kubetrain::NAME (what every other target links).
# Headers are included by their path from the source root ("operator/kube/client.h"), so the
# root is a PUBLIC include directory. Options, definitions and conditional links go on
# kubetrain_NAME afterwards.
function(kubetrain_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kubetrain_library(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "kubetrain_library(${name}): no SOURCES")
  endif()
  add_library(kubetrain_${name} ${ARG_SOURCES})
  add_library(kubetrain::${name} ALIAS kubetrain_${name})
  target_include_directories(kubetrain_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  if(ARG_PUBLIC_LIBS)
    target_link_libraries(kubetrain_${name} PUBLIC ${ARG_PUBLIC_LIBS})
  endif()
  if(ARG_PRIVATE_LIBS)
    target_link_libraries(kubetrain_${name} PRIVATE ${ARG_PRIVATE_LIBS})
  endif()
endfunction()

# kubetrain_test(NAME SOURCES... LIBS ... [LABELS ...])
# One GoogleTest binary per component, registered with CTest test by test.
function(kubetrain_test name)
  if(NOT KUBETRAIN_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gmock GTest::gtest_main)
  # KUBETRAIN_SOURCE_DIR (the source root) is defined in one small generated unit, so the other
  # units compile the same in every clone (cmake/test_source_dir.h).
  set(source_dir_unit ${CMAKE_CURRENT_BINARY_DIR}/${name}_source_dir.cc)
  file(CONFIGURE OUTPUT ${source_dir_unit}
       CONTENT "extern const char kubetrain_source_dir[] = \"@PROJECT_SOURCE_DIR@\";\n" @ONLY)
  target_sources(${name} PRIVATE ${source_dir_unit})
  set_source_files_properties(${source_dir_unit} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  target_compile_options(${name} PRIVATE
                         "SHELL:-include ${PROJECT_SOURCE_DIR}/cmake/test_source_dir.h")
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${ARG_LABELS}"
    DISCOVERY_TIMEOUT 60)
endfunction()
