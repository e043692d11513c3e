#pragma once
// FLEETPS_HOST_DEVICE marks a function that both the host and the CUDA kernels run, so that
// one definition serves both (heter_trainer/gpups/pass_rules.h, trainer/model/loss_rules.h).
// Outside nvcc it expands to nothing and such headers are plain C++.

#if defined(__CUDACC__)
#define FLEETPS_HOST_DEVICE __host__ __device__
#else
#define FLEETPS_HOST_DEVICE
#endif
