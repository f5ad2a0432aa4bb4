# Decides whether the CUDA kernels are built.
#
# PROTONDOSE_ENABLE_CUDA=ON (the default) builds them when nvcc is found; it is
# an error to ask for CUDA explicitly (-DPROTONDOSE_ENABLE_CUDA=ON on the command
# line) on a machine without nvcc, so a CPU-only build is never a surprise.
# Architectures: CMAKE_CUDA_ARCHITECTURES, default 90 (H100/H200). CI compiles
# one architecture; scripts/gpu-check builds sm_90 for the device machine.
set(PROTONDOSE_HAVE_CUDA OFF)
if(PROTONDOSE_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(PROTONDOSE_HAVE_CUDA ON)
    message(STATUS "protondose: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "protondose: nvcc not found; building without CUDA (gpu backends raise FeatureUnavailable)")
  endif()
else()
  message(STATUS "protondose: CUDA disabled (PROTONDOSE_ENABLE_CUDA=OFF)")
endif()
