#pragma once
// For the .cu files of protondose modules (gpu/, engine/); never included by a .cpp file.
// A grow-only, move-only device allocation (cudaMalloc; never managed memory).
#include <cstddef>
#include <utility>

#include "protondose/gpu/cuda/cuda_check.cuh"

namespace protondose::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) { reserve(count); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    swap(other);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }

  /// Ensures room for `count` elements; contents are lost when it grows.
  void reserve(std::size_t count) {
    if (count <= capacity_) return;
    if (ptr_) PD_CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    capacity_ = 0;
    PD_CUDA_CHECK(cudaMalloc(&ptr_, count * sizeof(T)));
    capacity_ = count;
  }
  T* get() const { return ptr_; }
  std::size_t capacity() const { return capacity_; }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(capacity_, other.capacity_);
  }
  T* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace protondose::cuda
