/* jitbmm from C: the log-semiring product out[b][i][j] = log sum_k exp(a[b][i][k] + b[b][k][j]) of a small problem,
 * on the CPU reference, checked against the formula written out, then planned for the GPU.
 *
 * Build (examples/CMakeLists.txt does this), from the repository root after scripts/build:
 *   cc -std=c99 -Wall -Wextra -Iinclude examples/c/logbmm.c -Lbuild -ljitbmm_c -Wl,-rpath,"$PWD/build" -lm
 * Exit status 0: the reference agreed with the formula and a plan was made, or there is no GPU here (said so). */
#include <math.h>
#include <stdio.h>

#include "jitbmm/c_api.h"

enum { B = 2, M = 3, K = 4, N = 5 };

static int failed(const char* call, jitbmm_status status) {
  fprintf(stderr, "%s failed (status %d): %s\n", call, (int)status, jitbmm_last_error());
  return 1;
}

int main(void) {
  /* A valid row-major problem; a zero-initialised jitbmm_problem is not one (all its strides are 0). */
  jitbmm_problem problem;
  jitbmm_status status = jitbmm_problem_row_major(&problem, "log", "f32", B, M, K, N);
  if (status != JITBMM_OK) return failed("jitbmm_problem_row_major", status);

  float a[B][M][K], b[B][K][N];
  for (int t = 0; t < B; ++t)
    for (int k = 0; k < K; ++k) {
      for (int i = 0; i < M; ++i) a[t][i][k] = (float)((t + 2 * i + 3 * k) % 5) / 4.0f - 0.5f;
      for (int j = 0; j < N; ++j) b[t][k][j] = (float)((3 * t + k + 2 * j) % 7) / 8.0f - 0.25f;
    }

  double out[B][M][N];
  status = jitbmm_reference(&problem, a, b, &out[0][0][0], NULL);
  if (status != JITBMM_OK) return failed("jitbmm_reference", status);

  double worst = 0.0;
  for (int t = 0; t < B; ++t)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double sum = 0.0;
        for (int k = 0; k < K; ++k) sum += exp((double)a[t][i][k] + (double)b[t][k][j]);
        const double error = fabs(out[t][i][j] - log(sum));
        if (error > worst) worst = error;
      }
  printf("log f32 %dx%dx%dx%d on the CPU reference, batch 0:\n", B, M, K, N);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) printf(" %8.5f", out[0][i][j]);
    printf("\n");
  }
  printf("largest difference from log sum exp written out: %.1e\n", worst);
  if (worst > 1e-9) {
    fprintf(stderr, "the reference disagrees with the formula\n");
    return 1;
  }

  /* The GPU: a plan compiles (or loads from the disk cache) a kernel for the current device. It runs on device
   * pointers from the caller's allocator (cudaMalloc, cuMemAlloc, a framework's), which this program, needing only
   * jitbmm's header, does not have: jitbmm_plan_run(plan, d_a, d_b, d_out, NULL, stream). */
  jitbmm_plan* plan = NULL;
  status = jitbmm_plan_create(&problem, &plan);
  if (status == JITBMM_NO_DRIVER) {
    printf("no GPU here, so no plan: %s\n", jitbmm_last_error());
    return 0;
  }
  if (status != JITBMM_OK) return failed("jitbmm_plan_create", status);
  const char* kernel = NULL;
  status = jitbmm_plan_kernel_name(plan, &kernel);
  if (status != JITBMM_OK) {
    jitbmm_plan_destroy(plan);
    return failed("jitbmm_plan_kernel_name", status);
  }
  printf("planned for the GPU: kernel %s\n", kernel);
  jitbmm_plan_destroy(plan);
  return 0;
}
