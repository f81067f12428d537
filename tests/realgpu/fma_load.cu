// A known load for the real-GPU check (tests/realgpu/load.py): every SM busy with dependent
// FP32 FMAs until the given seconds pass. Short kernels with a sync after each, so a SIGTERM
// from the test ends it within milliseconds; "ready" is printed once the first kernel has
// finished, so the test measures a GPU that is already working.
#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void fma_loop(float *out, int iters) {
    float x = threadIdx.x * 1e-3f, y = x + 1.0f, z = x + 2.0f, w = x + 3.0f;
    for (int i = 0; i < iters; ++i) {  // four independent chains keep the FMA pipes full
        x = fmaf(x, 1.0001f, 0.9999f);
        y = fmaf(y, 1.0001f, 0.9999f);
        z = fmaf(z, 1.0001f, 0.9999f);
        w = fmaf(w, 1.0001f, 0.9999f);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = x + y + z + w;  // the work cannot be elided
}

static void check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
        exit(1);
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 10.0;
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
    const int threads = 256, blocks = sms * 8;  // 2,048 threads an SM: full occupancy
    float *out = nullptr;
    check(cudaMalloc(&out, sizeof(float) * blocks * threads), "cudaMalloc");
    auto start = std::chrono::steady_clock::now();
    bool said = false;
    for (;;) {
        fma_loop<<<blocks, threads>>>(out, 1 << 16);
        check(cudaGetLastError(), "launch");
        check(cudaDeviceSynchronize(), "kernel");
        if (!said) {
            printf("ready: FMA loop on %d SMs\n", sms);
            fflush(stdout);
            said = true;
        }
        std::chrono::duration<double> ran = std::chrono::steady_clock::now() - start;
        if (ran.count() >= seconds) break;
    }
    cudaFree(out);
    return 0;
}
