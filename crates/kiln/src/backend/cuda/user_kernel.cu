/* What a user kernel (cuda_kernel) starts with: the toolkit's half types and cooperative groups,
 * and the helpers mlx's CUDA kernels offer, so kernels written for mlx build unchanged. */
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>

#define WARP_SIZE 32
#define inf __int_as_float(0x7f800000)

/* An input's shape (`<name>_shape`) and strides in elements (`<name>_strides`), passed by value
 * for up to 10 axes: index them, or hand `.data()` to elem_to_loc. */
struct Shape {
    int32_t axes[10];
    __device__ const int32_t* data() const { return axes; }
    __device__ int32_t operator[](int i) const { return axes[i]; }
};
struct Strides {
    int64_t axes[10];
    __device__ const int64_t* data() const { return axes; }
    __device__ int64_t operator[](int i) const { return axes[i]; }
};

/* The offset in elements of row-major element `elem` of an array with that shape and strides. */
template <typename IdxT = int64_t>
__device__ IdxT elem_to_loc(IdxT elem, const int32_t* shape, const int64_t* strides, int ndim) {
    IdxT loc = 0;
    for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
        loc += (elem % shape[i]) * strides[i];
        elem /= shape[i];
    }
    return loc;
}
