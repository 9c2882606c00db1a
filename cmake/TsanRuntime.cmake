# kubetrain_tsan_runtime(): in a ThreadSanitizer build (KUBETRAIN_SANITIZE=thread), links into
# every program of the tree what it needs to run under TSan, so that a program behaves the same
# wherever it is started: by a test, by localkube as a pod's process, or in a pod sandbox, whose
# containers get an image's clean environment and their own /tmp (no TSAN_OPTIONS, no
# LD_PRELOAD, and no view of a checkout under /tmp). Call it once, after every target is defined.
#   - scripts/sanitizers/absl_tsan.cc: Debian's abseil Mutex and CondVar, made visible to TSan.
#     The program defines their entry points and exports them (ENABLE_EXPORTS), so they stand in
#     for libabsl's in the program's own calls and in the shared libraries' (gRPC's gpr_mu).
#     Compiled without TSan, as the shim it is.
#   - __tsan_default_options and __tsan_default_suppressions (scripts/sanitizers/
#     tsan_defaults.cc.in): the run's options, and scripts/sanitizers/tsan.supp, whose text is
#     compiled in. TSAN_OPTIONS, where set, is read after them and overrides them per flag.
function(kubetrain_tsan_runtime)
  set(dir ${PROJECT_SOURCE_DIR}/scripts/sanitizers)
  file(READ ${dir}/tsan.supp TSAN_SUPPRESSIONS)
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${dir}/tsan.supp)
  configure_file(${dir}/tsan_defaults.cc.in ${PROJECT_BINARY_DIR}/tsan_defaults.cc @ONLY)
  add_library(kubetrain_tsan_runtime OBJECT ${dir}/absl_tsan.cc
                                            ${PROJECT_BINARY_DIR}/tsan_defaults.cc)
  target_compile_options(kubetrain_tsan_runtime PRIVATE -fno-sanitize=thread)
  set_target_properties(kubetrain_tsan_runtime PROPERTIES UNITY_BUILD OFF)
  _kubetrain_executables(${PROJECT_SOURCE_DIR} programs)
  foreach(program IN LISTS programs)
    target_sources(${program} PRIVATE $<TARGET_OBJECTS:kubetrain_tsan_runtime>)
    set_target_properties(${program} PROPERTIES ENABLE_EXPORTS ON)
  endforeach()
endfunction()

# The executables defined in DIR and the folders below it, into OUT.
function(_kubetrain_executables dir out)
  set(found "")
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      list(APPEND found ${target})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    _kubetrain_executables(${subdir} below)
    list(APPEND found ${below})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()
