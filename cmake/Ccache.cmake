# Compiles through ccache when it is installed (scripts/install-deps installs it), so that a
# rebuild after a small change, in this folder or in another clone of the repository, takes the
# unchanged units from the cache (README, "CI and the compile cache"). -DKUBETRAIN_CCACHE=OFF
# compiles directly; a launcher given on the command line (-DCMAKE_CXX_COMPILER_LAUNCHER=...) is
# kept.
#
# A unit compiles to the same object in every clone, and ccache finds it there:
# - Paths the compiler writes into its output (__FILE__, which GoogleTest's assertions expand,
#   and the debug info's file and folder names) are relative to the source root
#   (-ffile-prefix-map): a sanitizer report or backtrace names common/flags.cc, not one clone's
#   folder; gdb finds the sources when started from the source root (or with `directory`).
# - The tests' source root is defined in one small generated unit per test binary, not on every
#   unit's command line (cmake/test_source_dir.h).
# - The launcher gives ccache, as environment variables so that a developer's own ccache.conf is
#   otherwise left as it is: CCACHE_BASEDIR, the source root, under which absolute paths on the
#   command line (-I, -include, the source, -o) are hashed relative to the compiler's working
#   folder, the same in every clone; CCACHE_NOHASHDIR, which leaves the working folder itself
#   out of the hash of a -g build (inside the source root its name is mapped as above anyway).
# CMake's unity sources (#include "/abs/path/x.cc") differ between clones, so ccache's direct mode
# misses on them there; its preprocessor mode, which hashes the preprocessed text with the line
# markers made relative to the base folder, finds them. Measured between two clones: every unit
# but the generated one-line unit is found.
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
