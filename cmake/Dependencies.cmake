# Third-party dependencies, all from Debian's packages (scripts/install-deps installs them).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(ZLIB REQUIRED)
find_package(OpenSSL REQUIRED)
# Gloo (libgloo-dev) exports a plain `gloo` target from /usr/share/cmake/Gloo.
find_package(Gloo CONFIG REQUIRED)

find_package(PkgConfig REQUIRED)
# cpp-httplib ships a compiled library with a pkg-config file and no CMake package.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

if(KUBETRAIN_TESTS)
  find_package(GTest REQUIRED)
endif()

# yaml-cpp 0.7 on Debian exports a plain `yaml-cpp` target; give it the namespaced name we use.
if(TARGET yaml-cpp AND NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp)
endif()
