# Compiles through ccache when it is installed (scripts/install-deps installs it), so that a
# rebuild after a small change, in this folder or in another clone of the repository, takes the
# unchanged units from the cache (README, "Testing"). -DKUBETRAIN_CCACHE=OFF compiles directly; a
# launcher given on the command line (-DCMAKE_CXX_COMPILER_LAUNCHER=...) is kept.
#
# The launcher runs ccache with the settings that make a hit independent of the clone's folder,
# given as environment variables so that a developer's own ccache.conf is left as it is:
#   CCACHE_BASEDIR   the source root: absolute paths under it (-I, the source, -o) are hashed as
#                    paths relative to the compiler's working folder, which is the same in every
#                    clone (the build folders are inside the source root).
#   CCACHE_NOHASHDIR the working folder is left out of the hash for -g builds: an object taken
#                    from another clone's build names that clone's folder in its debug info
#                    (DW_AT_comp_dir); file names and lines are the same.
# CMake's unity sources (#include "/abs/path/x.cc") differ between clones, so ccache's direct
# mode misses on them there and its preprocessor mode, which hashes the preprocessed text with
# the line markers made relative to the base folder, finds the unit.
# Paths the compiler writes into its output (__FILE__, which GoogleTest's assertions expand, and
# the debug info's file names) are made relative to the source root, so they are the same in
# every clone: a test unit is then found in the cache from another clone, and a sanitizer report
# or backtrace names common/flags.cc rather than one clone's folder (gdb finds the sources from
# the source root, or with `directory`).
add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-ffile-prefix-map=${PROJECT_SOURCE_DIR}/=>)

option(KUBETRAIN_CCACHE "Compile through ccache when it is installed" ON)
if(KUBETRAIN_CCACHE)
  find_program(KUBETRAIN_CCACHE_PROGRAM ccache)
  if(KUBETRAIN_CCACHE_PROGRAM)
    foreach(lang C CXX CUDA)
      if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
        set(CMAKE_${lang}_COMPILER_LAUNCHER
            env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
            ${KUBETRAIN_CCACHE_PROGRAM})
      endif()
    endforeach()
    message(STATUS "Compiling through ${KUBETRAIN_CCACHE_PROGRAM} (-DKUBETRAIN_CCACHE=OFF: directly)")
  endif()
endif()
