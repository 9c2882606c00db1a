// Force-included into every test binary's units (kubetrain_test, cmake/KubetrainTargets.cmake):
// KUBETRAIN_SOURCE_DIR names the source root through a variable that one generated unit per
// binary defines, rather than a -D with the root's absolute path on every unit, so that a test's
// units compile the same in every clone and ccache finds them across clones (cmake/Ccache.cmake).
// A target that defines KUBETRAIN_SOURCE_DIR itself keeps its definition.
#pragma once

#ifndef KUBETRAIN_SOURCE_DIR
extern const char kubetrain_source_dir[];
#define KUBETRAIN_SOURCE_DIR kubetrain_source_dir
#endif
