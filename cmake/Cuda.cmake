# KUBETRAIN_CUDA=AUTO turns the CUDA backend on when nvcc is found (CUDA 13 lives in
# /usr/local/cuda on our machines), so CUDA sources compile in CI even where no GPU can run them.
# kubetrain_import_cuda_library(TARGET NAME HEADER WHAT): TARGET, an imported target for libNAME
# and HEADER found beside the CUDA toolkit (cache variables KUBETRAIN_<NAME>_LIBRARY and
# KUBETRAIN_<NAME>_INCLUDE_DIR); a configure error naming WHAT where either is missing.
function(kubetrain_import_cuda_library target name header what)
  string(TOUPPER ${name} var)
  find_library(KUBETRAIN_${var}_LIBRARY ${name}
    HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  find_path(KUBETRAIN_${var}_INCLUDE_DIR ${header}
    HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  if(NOT KUBETRAIN_${var}_LIBRARY OR NOT KUBETRAIN_${var}_INCLUDE_DIR)
    message(FATAL_ERROR "CUDA was found but ${what} was not (lib${name}.so and ${header} beside "
      "${CUDAToolkit_LIBRARY_DIR}); install ${what} or configure with -DKUBETRAIN_CUDA=OFF")
  endif()
  add_library(${target} UNKNOWN IMPORTED)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION ${KUBETRAIN_${var}_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${KUBETRAIN_${var}_INCLUDE_DIR})
endfunction()

set(KUBETRAIN_HAVE_CUDA OFF)
if(NOT KUBETRAIN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # CMake 3.25 cannot detect a default architecture with nvcc 13: name them. Machine code
    # (SASS) for T4 (75), A100/A30 (80), A10/A40/RTX 30 (86), L4/L40/RTX 40 (89), H100/H200 (90)
    # and B200 (100), plus PTX for 100, which newer GPUs compile when the program loads.
    # docker/worker.Dockerfile and the README name the same list.
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 75-real 80-real 86-real 89-real 90-real 100-real 100-virtual)
    endif()
    enable_language(CUDA)
    # System include folders as "-isystem PATH", not CMake's "-isystem=PATH" for nvcc: ccache
    # rewrites the separate form relative to the source root, so that a clone in another folder
    # finds the CUDA units in the cache too (cmake/Ccache.cmake); nvcc takes both.
    set(CMAKE_INCLUDE_SYSTEM_FLAG_CUDA "-isystem ")
    # CMake 3.25 knows nvcc's -std flags only up to C++17; nvcc 12+ takes -std=c++20.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # One shared CUDA runtime per process, the one cuBLAS and NCCL use, rather than nvcc's static
    # default linked into every binary that takes CUDA code.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    find_package(CUDAToolkit REQUIRED)
    # NCCL and cuDNN 9 (convolutions on the GPU) ship beside the toolkit on our machines, with no
    # CMake targets (CMake 3.25 has no CUDA::nccl).
    kubetrain_import_cuda_library(NCCL::nccl nccl nccl.h NCCL)
    kubetrain_import_cuda_library(CUDNN::cudnn cudnn cudnn.h "cuDNN 9")
    set(KUBETRAIN_HAVE_CUDA ON)
  elseif(KUBETRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KUBETRAIN_CUDA=ON but no CUDA compiler was found; install CUDA or use AUTO")
  endif()
endif()
message(STATUS "kubetrain: CUDA backend ${KUBETRAIN_HAVE_CUDA}")
