/* Test double of cuDNN's version header (cuDNN @@CUDNN_VERSION@@ for CUDA
 * @@CUDA_MAJOR@@). Only the version macros, as in the real header. */
#ifndef CUDNN_VERSION_H_
#define CUDNN_VERSION_H_

#define CUDNN_MAJOR @@CUDNN_MAJOR@@
#define CUDNN_MINOR @@CUDNN_MINOR@@
#define CUDNN_PATCHLEVEL @@CUDNN_PATCHLEVEL@@

#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

#endif /* CUDNN_VERSION_H_ */
