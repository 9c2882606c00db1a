# KUBETRAIN_CUDA=AUTO turns the CUDA backend on when nvcc is found (CUDA 13 lives in
# /usr/local/cuda on our machines), so CUDA sources compile in CI even where no GPU can run them.
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
    # NCCL ships beside the toolkit on our machines; CMake 3.25 has no CUDA::nccl target.
    find_library(KUBETRAIN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    find_path(KUBETRAIN_NCCL_INCLUDE_DIR nccl.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    if(NOT KUBETRAIN_NCCL_LIBRARY OR NOT KUBETRAIN_NCCL_INCLUDE_DIR)
      message(FATAL_ERROR "CUDA was found but NCCL was not (libnccl.so and nccl.h beside "
        "${CUDAToolkit_LIBRARY_DIR}); install NCCL or configure with -DKUBETRAIN_CUDA=OFF")
    endif()
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION ${KUBETRAIN_NCCL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${KUBETRAIN_NCCL_INCLUDE_DIR})
    # cuDNN 9 (convolutions on the GPU) ships beside the toolkit too, with no CMake target.
    find_library(KUBETRAIN_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    find_path(KUBETRAIN_CUDNN_INCLUDE_DIR cudnn.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    if(NOT KUBETRAIN_CUDNN_LIBRARY OR NOT KUBETRAIN_CUDNN_INCLUDE_DIR)
      message(FATAL_ERROR "CUDA was found but cuDNN was not (libcudnn.so and cudnn.h beside "
        "${CUDAToolkit_LIBRARY_DIR}); install cuDNN 9 or configure with -DKUBETRAIN_CUDA=OFF")
    endif()
    add_library(CUDNN::cudnn UNKNOWN IMPORTED)
    set_target_properties(CUDNN::cudnn PROPERTIES
      IMPORTED_LOCATION ${KUBETRAIN_CUDNN_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${KUBETRAIN_CUDNN_INCLUDE_DIR})
    set(KUBETRAIN_HAVE_CUDA ON)
  elseif(KUBETRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KUBETRAIN_CUDA=ON but no CUDA compiler was found; install CUDA or use AUTO")
  endif()
endif()
message(STATUS "kubetrain: CUDA backend ${KUBETRAIN_HAVE_CUDA}")
