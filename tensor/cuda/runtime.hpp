// tensor/cuda/runtime.hpp: the few CUDA runtime services the host code needs (allocation, copies,
// synchronisation, device count), callable from plain C++ translation units.
//
// Implemented in runtime.cu, part of libftcc_cuda.so (only in builds with CUDA). libftcc reaches
// these through tensor/cuda/backend.hpp; a program that calls them directly links libftcc_cuda.
#pragma once

#include <cstddef>

namespace ftcc::tensor::cuda {

void* device_alloc(std::size_t bytes);
void device_free(void* p) noexcept;
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, std::size_t bytes);
void synchronize();
// Number of usable devices; 0 when the driver or the device is missing (never throws).
int device_count() noexcept;
// Makes device `ordinal` (0 <= ordinal < device_count()) the one the calling thread's later
// allocations, copies and launches use (cudaSetDevice). Throws ftcc::Error otherwise.
void set_device(int ordinal);

}  // namespace ftcc::tensor::cuda
