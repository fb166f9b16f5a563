/*
 * gpu_compat.h - the few runtime names and index builtins the GPU sources
 * use, mapped to HIP (AMD: amdclang++/hipcc, or Debian's clang with
 * -nogpulib) or to CUDA (nvcc compiling the same .hip files with -x cu).
 *
 * HIP's own NVIDIA headers do not build with CUDA 13, and Debian ships no
 * gfx942 device library (whose __ockl_* functions HIP's threadIdx needs),
 * so the sources use these names only:
 *   gpuError_t, gpuSuccess, gpuStream_t, gpuMalloc, gpuFree, gpuMemcpyAsync,
 *   gpuMemcpy2DAsync, gpuMemsetAsync, gpuDeviceSynchronize,
 *   gpuErrorMemoryAllocation, gpuErrorNotSupported, gpuErrorInvalidValue,
 *   gpuMemcpyKind values, gpuStreamSynchronize, gpuGetDeviceCount,
 *   gpuGetErrorString, gpuGetLastError, gpuDeviceProp_t, gpuGetDeviceProperties,
 *   gpuGetDevice, gpuFuncSetMaxDynamicSharedMemory, gpuPointerAttributes_t,
 *   gpuPointerGetAttributes, gpuMemoryTypeDevice, gpuMemoryTypeHost,
 *   SMM_GPU_PTR_TYPE(attributes), SMM_GPU_PTR_MANAGED(attributes);
 *   SMM_TID_X/Y/Z, SMM_BID_X/Y/Z, SMM_BDIM_X/Y/Z, SMM_GDIM_X (device code);
 *   SMM_HD (host and device inline), SMM_DEV (device inline);
 *   SMM_GPU_AMD / SMM_GPU_NVIDIA (which compiler is building).
 */
#ifndef SMM_GPU_COMPAT_H
#define SMM_GPU_COMPAT_H

#if defined(__HIP__) || defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
/* ------------------------------ AMD ------------------------------ */
#define SMM_GPU_AMD 1
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#if defined(__HIP__)
#include <hip/hip_runtime.h>
#endif
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipDeviceProp_t gpuDeviceProp_t;
typedef hipMemcpyKind gpuMemcpyKind;
#define gpuSuccess hipSuccess
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemcpyHostToHost hipMemcpyHostToHost
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpy2DAsync hipMemcpy2DAsync
#define gpuErrorNotSupported hipErrorNotSupported
#define gpuErrorInvalidValue hipErrorInvalidValue
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDevice hipGetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
typedef hipPointerAttribute_t gpuPointerAttributes_t;
#define gpuPointerGetAttributes hipPointerGetAttributes
#define gpuMemoryTypeDevice hipMemoryTypeDevice
#define gpuMemoryTypeHost hipMemoryTypeHost
/* ROCm 6 renamed memoryType to type; managed memory has isManaged set. */
#if defined(HIP_VERSION_MAJOR) && HIP_VERSION_MAJOR >= 6
#define SMM_GPU_PTR_TYPE(a) ((a).type)
#else
#define SMM_GPU_PTR_TYPE(a) ((a).memoryType)
#endif
#define SMM_GPU_PTR_MANAGED(a) ((a).isManaged != 0)
#define gpuFuncSetMaxDynamicSharedMemory(f, bytes) \
    hipFuncSetAttribute((const void *)(f), hipFuncAttributeMaxDynamicSharedMemorySize, (bytes))
#if defined(__HIP_DEVICE_COMPILE__)
/* Straight from the hardware registers: no device library needed. */
#define SMM_TID_X ((int)__builtin_amdgcn_workitem_id_x())
#define SMM_TID_Y ((int)__builtin_amdgcn_workitem_id_y())
#define SMM_TID_Z ((int)__builtin_amdgcn_workitem_id_z())
#define SMM_BID_X ((int)__builtin_amdgcn_workgroup_id_x())
#define SMM_BID_Y ((int)__builtin_amdgcn_workgroup_id_y())
#define SMM_BID_Z ((int)__builtin_amdgcn_workgroup_id_z())
/* Block sizes are compile-time constants in our kernels: each kernel passes
 * its own (SMM_BDIM_* are for code that cannot). */
#define SMM_BDIM_X ((int)__builtin_amdgcn_workgroup_size_x())
#define SMM_BDIM_Y ((int)__builtin_amdgcn_workgroup_size_y())
#define SMM_BDIM_Z ((int)__builtin_amdgcn_workgroup_size_z())
#define SMM_GDIM_X ((int)(__builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x()))
/* As HIP's __syncthreads: the barrier alone does not order memory, so
 * workgroup fences around it make shared-memory writes before it visible
 * to reads after it (and keep the compiler from moving them across). */
#define SMM_SYNCTHREADS()                                      \
    do {                                                       \
        __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); \
        __builtin_amdgcn_s_barrier();                          \
        __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup"); \
    } while (0)
#elif defined(__HIP__)
/* The host pass of a HIP compile parses kernel bodies but never runs them. */
#define SMM_TID_X 0
#define SMM_TID_Y 0
#define SMM_TID_Z 0
#define SMM_BID_X 0
#define SMM_BID_Y 0
#define SMM_BID_Z 0
#define SMM_BDIM_X 1
#define SMM_BDIM_Y 1
#define SMM_BDIM_Z 1
#define SMM_GDIM_X 1
#define SMM_SYNCTHREADS() ((void)0)
#endif
#define SMM_HD __host__ __device__ inline
#define SMM_DEV __device__ inline

#elif defined(__CUDACC__)
/* ----------------------------- NVIDIA ----------------------------- */
#define SMM_GPU_NVIDIA 1
#include <cuda_runtime.h>
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaDeviceProp gpuDeviceProp_t;
typedef cudaMemcpyKind gpuMemcpyKind;
#define gpuSuccess cudaSuccess
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemcpyHostToHost cudaMemcpyHostToHost
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpy2DAsync cudaMemcpy2DAsync
#define gpuErrorNotSupported cudaErrorNotSupported
#define gpuErrorInvalidValue cudaErrorInvalidValue
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDevice cudaGetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
typedef cudaPointerAttributes gpuPointerAttributes_t;
#define gpuPointerGetAttributes cudaPointerGetAttributes
#define gpuMemoryTypeDevice cudaMemoryTypeDevice
#define gpuMemoryTypeHost cudaMemoryTypeHost
#define SMM_GPU_PTR_TYPE(a) ((a).type)
#define SMM_GPU_PTR_MANAGED(a) ((a).type == cudaMemoryTypeManaged)
#define gpuFuncSetMaxDynamicSharedMemory(f, bytes) \
    cudaFuncSetAttribute((f), cudaFuncAttributeMaxDynamicSharedMemorySize, (bytes))
#define SMM_TID_X ((int)threadIdx.x)
#define SMM_TID_Y ((int)threadIdx.y)
#define SMM_TID_Z ((int)threadIdx.z)
#define SMM_BID_X ((int)blockIdx.x)
#define SMM_BID_Y ((int)blockIdx.y)
#define SMM_BID_Z ((int)blockIdx.z)
#define SMM_BDIM_X ((int)blockDim.x)
#define SMM_BDIM_Y ((int)blockDim.y)
#define SMM_BDIM_Z ((int)blockDim.z)
#define SMM_GDIM_X ((int)gridDim.x)
#define SMM_SYNCTHREADS() __syncthreads()
#define SMM_HD __host__ __device__ inline
#define SMM_DEV __device__ inline

#else
/* Plain host compilers (the host-side model tests): SMM_HD code only. */
#define SMM_HD static inline
#endif

#endif
